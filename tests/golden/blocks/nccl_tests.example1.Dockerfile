# ---- build
# nccl-tests 2.19.6 from source (git+https://github.com/NVIDIA/nccl-tests.git@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432)
COPY artifacts/nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar /tmp/artifacts/
RUN awk -v f=nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar)" = a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 \
 && mkdir -p /tmp/src/nccl_tests \
 && tar -xf /tmp/artifacts/nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar --strip-components=1 -C /tmp/src/nccl_tests \
 && rm /tmp/artifacts/nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar
WORKDIR /tmp/src/nccl_tests
RUN make -j"$(nproc)" \
      MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
      NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
      NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR=/tmp/nccl-tests-build \
 && mkdir -p /opt/nccl-tests/bin \
 && cp /tmp/nccl-tests-build/*_perf /opt/nccl-tests/bin/ \
 && rm -rf /tmp/src/nccl_tests /tmp/nccl-tests-build
WORKDIR /
