# ---- build
# aws-ofi-nccl 1.21.1 from source (git+https://github.com/aws/aws-ofi-nccl.git@2475c4c736907e68ebeadb3848f31231ee4a44d0)
COPY artifacts/aws-ofi-nccl-2475c4c736907e68ebeadb3848f31231ee4a44d0.tar /tmp/artifacts/
RUN awk -v f=aws-ofi-nccl-2475c4c736907e68ebeadb3848f31231ee4a44d0.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/aws-ofi-nccl-2475c4c736907e68ebeadb3848f31231ee4a44d0.tar)" = 2475c4c736907e68ebeadb3848f31231ee4a44d0 \
 && mkdir -p /tmp/src/aws_ofi_nccl \
 && tar -xf /tmp/artifacts/aws-ofi-nccl-2475c4c736907e68ebeadb3848f31231ee4a44d0.tar --strip-components=1 -C /tmp/src/aws_ofi_nccl \
 && rm /tmp/artifacts/aws-ofi-nccl-2475c4c736907e68ebeadb3848f31231ee4a44d0.tar
WORKDIR /tmp/src/aws_ofi_nccl
RUN printf '%s\n' 1.21.1 > .release_version \
 && ./autogen.sh \
 && ./configure --prefix=/opt/aws-ofi-nccl \
      --with-cuda=/usr/local/cuda \
      --with-mpi=/usr/lib/x86_64-linux-gnu/openmpi \
      --enable-platform-aws \
      --disable-tests \
 && make -j"$(nproc)" \
 && make install \
 && rm -rf /tmp/src/aws_ofi_nccl
WORKDIR /
