# ---- build
# cuda_runtime 12.8.90 from the wheel nvidia-cuda-runtime-cu12==12.8.90
COPY artifacts/nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
RUN echo 'adade8dcbd0edf427b7204d480d6066d33902cab2a4707dcfc48a2d0fd44ab90  /tmp/artifacts/nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-cuda_runtime \
 && mkdir -p /opt/nvidia/cuda \
 && for d in /tmp/wheel-cuda_runtime/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda/; done \
 && find /opt/nvidia/cuda -name '__init__.py' -delete \
 && for lib in /opt/nvidia/cuda/lib/*.so.*; do ln -sf "${lib##*/}" "${lib%%.so.*}.so"; done \
 && ln -s lib /opt/nvidia/cuda/lib64 \
 && rm -rf /tmp/wheel-cuda_runtime /tmp/artifacts/nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl

