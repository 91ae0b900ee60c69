# ---- build
# nccl 2.27.7 from source (git+https://github.com/NVIDIA/nccl.git@593de54e52679b51428571c13271e2ea9f91b1b1)
COPY artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar /tmp/artifacts/
RUN awk -v f=nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar)" = 593de54e52679b51428571c13271e2ea9f91b1b1 \
 && mkdir -p /tmp/src/nccl \
 && tar -xf /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar --strip-components=1 -C /tmp/src/nccl \
 && rm /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar
WORKDIR /tmp/src/nccl
RUN make -j"$(nproc)" src.build PREFIX=/opt/nvidia/nccl CUDA_HOME=/usr/local/cuda \
      NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 \
 && make src.install PREFIX=/opt/nvidia/nccl \
 && rm -rf /tmp/src/nccl
WORKDIR /
