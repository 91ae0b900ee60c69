# ---- build
# cuda_runtime 13.0.96 from the wheel nvidia-cuda-runtime==13.0.96
COPY artifacts/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
RUN echo '7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548  /tmp/artifacts/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-cuda_runtime \
 && mkdir -p /opt/nvidia/cuda \
 && for d in /tmp/wheel-cuda_runtime/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda/; done \
 && find /opt/nvidia/cuda -name '__init__.py' -delete \
 && for lib in /opt/nvidia/cuda/lib/*.so.*; do ln -sf "${lib##*/}" "${lib%%.so.*}.so"; done \
 && ln -s lib /opt/nvidia/cuda/lib64 \
 && rm -rf /tmp/wheel-cuda_runtime /tmp/artifacts/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
# build-only wheels: /opt/nvidia/cuda-toolkit = cuda_runtime + compilers/headers, the CUDA_HOME of the builds below
COPY artifacts/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
COPY artifacts/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl /tmp/artifacts/
COPY artifacts/nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
COPY artifacts/nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
RUN mkdir -p /opt/nvidia/cuda-toolkit \
 && cp -a /opt/nvidia/cuda/. /opt/nvidia/cuda-toolkit/ \
 && echo '56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03  /tmp/artifacts/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-extra \
 && for d in /tmp/wheel-extra/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda-toolkit/; done \
 && rm -rf /tmp/wheel-extra /tmp/artifacts/nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \
 && echo 'c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0  /tmp/artifacts/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl /tmp/wheel-extra \
 && for d in /tmp/wheel-extra/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda-toolkit/; done \
 && rm -rf /tmp/wheel-extra /tmp/artifacts/nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl \
 && echo '2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4  /tmp/artifacts/nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-extra \
 && for d in /tmp/wheel-extra/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda-toolkit/; done \
 && rm -rf /tmp/wheel-extra /tmp/artifacts/nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \
 && echo 'e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649  /tmp/artifacts/nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-extra \
 && for d in /tmp/wheel-extra/nvidia/*/; do cp -a "$d". /opt/nvidia/cuda-toolkit/; done \
 && rm -rf /tmp/wheel-extra /tmp/artifacts/nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \
 && find /opt/nvidia/cuda-toolkit -name '__init__.py' -delete

