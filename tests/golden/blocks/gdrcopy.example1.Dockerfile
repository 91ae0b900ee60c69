# ---- build
# gdrcopy 2.6 from source (git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d)
COPY artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar /tmp/artifacts/
RUN awk -v f=gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar)" = 93c606bbcaa10457cbbab93163aa446d902b983d \
 && mkdir -p /tmp/src/gdrcopy \
 && tar -xf /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar --strip-components=1 -C /tmp/src/gdrcopy \
 && rm /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar
WORKDIR /tmp/src/gdrcopy
RUN mkdir -p /tmp/cuda-stub \
 && gcc -E -P -I/usr/local/cuda/include /usr/local/cuda/include/cuda.h | tr '\n' ' ' | sed 's/;/;\n/g' \
  | sed -nE 's/^[[:space:]]*(extern[[:space:]]+)?CUresult[[:space:]]+(cu[A-Za-z0-9_]+)[[:space:]]*\(.*/int \2(void) { return 999; }/p' \
  | sort -u > /tmp/cuda-stub/libcuda.c \
 && test "$(wc -l < /tmp/cuda-stub/libcuda.c)" -gt 100 \
 && gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /tmp/cuda-stub/libcuda.so /tmp/cuda-stub/libcuda.c \
 && LIBRARY_PATH=/tmp/cuda-stub make -j"$(nproc)" prefix=/opt/gdrcopy CUDA=/usr/local/cuda \
      lib lib_install exes exes_install \
 && rm -rf /tmp/src/gdrcopy /tmp/cuda-stub
WORKDIR /
