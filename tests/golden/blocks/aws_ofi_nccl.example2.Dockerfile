# ---- build
# aws-ofi-nccl 1.17.3 from source (git+https://github.com/aws/aws-ofi-nccl.git@93fa84ca880325013b2f639356bbb60f075148af)
COPY artifacts/aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar /tmp/artifacts/
RUN awk -v f=aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar)" = 93fa84ca880325013b2f639356bbb60f075148af \
 && mkdir -p /tmp/src/aws_ofi_nccl \
 && tar -xf /tmp/artifacts/aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar --strip-components=1 -C /tmp/src/aws_ofi_nccl \
 && rm /tmp/artifacts/aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar
WORKDIR /tmp/src/aws_ofi_nccl
RUN printf '%s\n' 1.17.3 > .release_version \
 && ./autogen.sh \
 && ./configure --prefix=/opt/aws-ofi-nccl \
      --with-cuda=/usr/local/cuda \
      --with-mpi=/usr/lib/x86_64-linux-gnu/openmpi \
      --enable-platform-aws=no \
      --disable-tests \
 && make -j"$(nproc)" \
 && make install \
 && rm -rf /tmp/src/aws_ofi_nccl
WORKDIR /
