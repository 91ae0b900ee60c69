# ---- build
# gdrcopy 2.6 from source (git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d)
COPY artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar /tmp/artifacts/
RUN awk -v f=gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar)" = 93c606bbcaa10457cbbab93163aa446d902b983d \
 && mkdir -p /tmp/src/gdrcopy \
 && tar -xf /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar --strip-components=1 -C /tmp/src/gdrcopy \
 && rm /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar
WORKDIR /tmp/src/gdrcopy
RUN make -j"$(nproc)" prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install \
 && rm -rf /tmp/src/gdrcopy
WORKDIR /
