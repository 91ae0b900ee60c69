# Rendered by efa-image-build from matrix.local.yaml (variant local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6). Do not edit: change the matrix
# and run `build.py render`. Build context: build/local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6/context (artifacts/, validators/, training/).

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM localbase/debian:bookworm-minbase AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# No apt lists or downloads in any layer: the base's own go here, each apt step's below (apt_clean).
RUN rm -rf /var/cache/apt/* /var/lib/apt/lists/*
RUN --mount=type=cache,id=efa-image-build-apt-cache-debian12-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-debian12-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates=20230311+deb12u1 \
      python3=3.11.2-1+b1 \
      rdma-core=44.0-2 \
      ibverbs-providers=44.0-2 \
      libhwloc15=2.9.0-1 \
      libfabric1=1.17.0-3 \
      libfabric-bin=1.17.0-3 \
      openmpi-bin=4.1.4-3+b1 \
      libopenmpi3=4.1.4-3+b1 \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }


# ---- builder: compilers, archives and sources live here only -------------------------------------------
FROM system AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Build tools are builder-only and left to the base's mirror; pinned -dev packages match the runtime.
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-debian12-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-debian12-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 \
      git \
      make \
      gcc \
      g++ \
      autoconf \
      automake \
      libtool \
      libhwloc-dev \
      libfabric-dev=1.17.0-3 \
      libopenmpi-dev=4.1.4-3+b1 \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
# Files pinned by commit or signature are checked against the build host's SHA256SUMS (made after it verified
# the commit or the GPG signature); files with a pinned sha256 are checked against the pin itself.
COPY artifacts/SHA256SUMS /tmp/artifacts/SHA256SUMS

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

# gdrcopy 2.6 from source (git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d)
COPY artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar /tmp/artifacts/
RUN awk -v f=gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar)" = 93c606bbcaa10457cbbab93163aa446d902b983d \
 && mkdir -p /tmp/src/gdrcopy \
 && tar -xf /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar --strip-components=1 -C /tmp/src/gdrcopy \
 && rm /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar
WORKDIR /tmp/src/gdrcopy
RUN mkdir -p /tmp/cuda-stub \
 && gcc -E -P -I/opt/nvidia/cuda-toolkit/include /opt/nvidia/cuda-toolkit/include/cuda.h | tr '\n' ' ' | sed 's/;/;\n/g' \
  | sed -nE 's/^[[:space:]]*(extern[[:space:]]+)?CUresult[[:space:]]+(cu[A-Za-z0-9_]+)[[:space:]]*\(.*/int \2(void) { return 999; }/p' \
  | sort -u > /tmp/cuda-stub/libcuda.c \
 && test "$(wc -l < /tmp/cuda-stub/libcuda.c)" -gt 100 \
 && gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /tmp/cuda-stub/libcuda.so /tmp/cuda-stub/libcuda.c \
 && LIBRARY_PATH=/tmp/cuda-stub make -j"$(nproc)" prefix=/opt/gdrcopy CUDA=/opt/nvidia/cuda-toolkit \
      lib lib_install exes exes_install \
 && rm -rf /tmp/src/gdrcopy /tmp/cuda-stub
WORKDIR /
# nccl 2.27.7 from the wheel nvidia-nccl-cu13==2.27.7
COPY artifacts/nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
RUN echo 'b28a524abd8389b76a4a3f133c76a7aaa7005e47fcaa9d9603b90103927a3f93  /tmp/artifacts/nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-nccl \
 && mkdir -p /opt/nvidia/nccl \
 && for d in /tmp/wheel-nccl/nvidia/*/; do cp -a "$d". /opt/nvidia/nccl/; done \
 && find /opt/nvidia/nccl -name '__init__.py' -delete \
 && for lib in /opt/nvidia/nccl/lib/*.so.*; do ln -sf "${lib##*/}" "${lib%%.so.*}.so"; done \
 && ln -s lib /opt/nvidia/nccl/lib64 \
 && rm -rf /tmp/wheel-nccl /tmp/artifacts/nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl

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
      --with-cuda=/opt/nvidia/cuda-toolkit \
      --enable-cudart-dynamic \
      --with-mpi=/usr/lib/x86_64-linux-gnu/openmpi \
      --enable-platform-aws=no \
      --disable-tests \
 && make -j"$(nproc)" \
 && make install \
 && rm -rf /tmp/src/aws_ofi_nccl
WORKDIR /
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
      NCCL_HOME=/opt/nvidia/nccl CUDA_HOME=/opt/nvidia/cuda-toolkit \
      NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR=/tmp/nccl-tests-build \
 && mkdir -p /opt/nccl-tests/bin \
 && cp /tmp/nccl-tests-build/*_perf /opt/nccl-tests/bin/ \
 && rm -rf /tmp/src/nccl_tests /tmp/nccl-tests-build
WORKDIR /
# Headers and static libraries stay in the builder: the runtime stage copies libraries and programs only.
RUN for d in /opt/nvidia/cuda /opt/gdrcopy /opt/nvidia/nccl /opt/aws-ofi-nccl /opt/nccl-tests; do rm -rf "$d/include"; find "$d" -name '*.a' -delete; done

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM system AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=builder /opt/nvidia/cuda /opt/nvidia/cuda
COPY --from=builder /opt/gdrcopy /opt/gdrcopy
COPY --from=builder /opt/nvidia/nccl /opt/nvidia/nccl
COPY --from=builder /opt/aws-ofi-nccl /opt/aws-ofi-nccl
COPY --from=builder /opt/nccl-tests /opt/nccl-tests
RUN printf '%s\n' /opt/nvidia/cuda/lib /opt/gdrcopy/lib /opt/nvidia/nccl/lib /opt/aws-ofi-nccl/lib > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/nvidia/cuda/lib:/opt/gdrcopy/lib:/opt/nvidia/nccl/lib:/opt/aws-ofi-nccl/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ENV PATH="/opt/gdrcopy/bin:/opt/nccl-tests/bin:${PATH}"
# validators: `/usr/bin/python3 -m efa_validators --help`
COPY validators /opt/efa-image-build/efa_validators
RUN /usr/bin/python3 -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"]).mkdir(parents=True, exist_ok=True); pathlib.Path(sysconfig.get_paths()["purelib"], "efa-image-build.pth").write_text("/opt/efa-image-build\n")' \
 && /usr/bin/python3 -m compileall -q /opt/efa-image-build/efa_validators \
 && /usr/bin/python3 -c 'import efa_validators'
# training code (SageMaker layout: /opt/ml/code, SAGEMAKER_PROGRAM)
COPY training /opt/ml/code
WORKDIR /opt/ml/code
ENV SAGEMAKER_PROGRAM="train.py" \
    SAGEMAKER_SUBMIT_DIRECTORY="/opt/ml/code"
# SageMaker starts a bring-your-own image as `IMAGE train` (DLCs carry the training toolkit's `train`).
# the variables are expanded when `train` runs, not now:
# hadolint ignore=SC2016
RUN printf '%s\n' '#!/bin/sh' 'cd "${SAGEMAKER_SUBMIT_DIRECTORY}" && exec /usr/bin/python3 "${SAGEMAKER_PROGRAM}" "$@"' > /usr/local/bin/train \
 && chmod 0755 /usr/local/bin/train

# The lock inside the image too: node-check reads it on the cluster, where labels are out of reach.
COPY variant.lock.json /opt/efa-image-build/variant.lock.json
LABEL org.efa-image-build.aws-ofi-nccl.version="1.17.3" \
      org.efa-image-build.cuda-runtime.version="13.0.96" \
      org.efa-image-build.cuda.version="13.0" \
      org.efa-image-build.gdrcopy.version="2.6" \
      org.efa-image-build.libfabric.version="1.17.0" \
      org.efa-image-build.nccl-tests.version="2.19.6" \
      org.efa-image-build.nccl.version="2.27.7" \
      org.efa-image-build.openmpi.version="4.1.4" \
      org.efa-image-build.variant="local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6" \
      org.opencontainers.image.description="Debian 12, CUDA 13 wheels, GDRCopy, aws-ofi-nccl (platform aws off) and nccl-tests built from source" \
      org.opencontainers.image.title="local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6" \
      org.opencontainers.image.vendor="efa-image-build example" \
      org.efa-image-build.lock="{\"axes\":{\"ofi\":\"1.17.3\",\"tests\":\"2.19.6\"},\"base\":{\"digest\":null,\"image\":\"localbase/debian:bookworm-minbase\",\"kind\":\"local\",\"os\":\"debian12\",\"registry_arg\":null,\"runtime_image\":null},\"build_steps\":[],\"components\":{\"aws_ofi_nccl\":{\"artifacts\":[{\"commit\":\"93fa84ca880325013b2f639356bbb60f075148af\",\"filename\":\"aws-ofi-nccl-93fa84ca880325013b2f639356bbb60f075148af.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/aws/aws-ofi-nccl.git@93fa84ca880325013b2f639356bbb60f075148af\",\"url\":\"https://github.com/aws/aws-ofi-nccl.git\"}],\"bundled_by\":null,\"commit\":\"93fa84ca880325013b2f639356bbb60f075148af\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{\"platform_aws\":\"no\"},\"prefix\":\"/opt/aws-ofi-nccl\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/aws/aws-ofi-nccl.git\",\"version\":\"1.17.3\"},\"cuda_runtime\":{\"artifacts\":[{\"filename\":\"nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-cuda-runtime==13.0.96\",\"sha256\":\"7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548\",\"source\":\"pypi:nvidia-cuda-runtime==13.0.96\"},{\"filename\":\"nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-cuda-nvcc==13.0.88\",\"sha256\":\"56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03\",\"source\":\"pypi:nvidia-cuda-nvcc==13.0.88\"},{\"filename\":\"nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-nvvm==13.0.88\",\"sha256\":\"c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0\",\"source\":\"pypi:nvidia-nvvm==13.0.88\"},{\"filename\":\"nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-cuda-crt==13.0.88\",\"sha256\":\"2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4\",\"source\":\"pypi:nvidia-cuda-crt==13.0.88\"},{\"filename\":\"nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-cuda-cccl==13.0.85\",\"sha256\":\"e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649\",\"source\":\"pypi:nvidia-cuda-cccl==13.0.85\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"wheel\",\"packages\":[],\"params\":{\"toolkit\":\"yes\"},\"prefix\":\"/opt/nvidia/cuda\",\"sha256\":\"7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548\",\"source\":\"pypi\",\"url\":null,\"version\":\"13.0.96\"},\"gdrcopy\":{\"artifacts\":[{\"commit\":\"93c606bbcaa10457cbbab93163aa446d902b983d\",\"filename\":\"gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d\",\"url\":\"https://github.com/NVIDIA/gdrcopy.git\"}],\"bundled_by\":null,\"commit\":\"93c606bbcaa10457cbbab93163aa446d902b983d\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{\"tests\":\"yes\"},\"prefix\":\"/opt/gdrcopy\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/NVIDIA/gdrcopy.git\",\"version\":\"2.6\"},\"libfabric\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[\"libfabric-dev=1.17.0-3\"],\"method\":\"apt\",\"packages\":[\"libfabric1=1.17.0-3\",\"libfabric-bin=1.17.0-3\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"1.17.0\"},\"nccl\":{\"artifacts\":[{\"filename\":\"nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-nccl-cu13==2.27.7\",\"sha256\":\"b28a524abd8389b76a4a3f133c76a7aaa7005e47fcaa9d9603b90103927a3f93\",\"source\":\"pypi:nvidia-nccl-cu13==2.27.7\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"wheel\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/nvidia/nccl\",\"sha256\":\"b28a524abd8389b76a4a3f133c76a7aaa7005e47fcaa9d9603b90103927a3f93\",\"source\":\"pypi\",\"url\":null,\"version\":\"2.27.7\"},\"nccl_tests\":{\"artifacts\":[{\"commit\":\"a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"filename\":\"nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/NVIDIA/nccl-tests.git@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"url\":\"https://github.com/NVIDIA/nccl-tests.git\"}],\"bundled_by\":null,\"commit\":\"a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{\"mpi\":\"1\"},\"prefix\":\"/opt/nccl-tests\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/NVIDIA/nccl-tests.git\",\"version\":\"2.19.6\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[\"libopenmpi-dev=4.1.4-3+b1\"],\"method\":\"apt\",\"packages\":[\"openmpi-bin=4.1.4-3+b1\",\"libopenmpi3=4.1.4-3+b1\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"4.1.4\"}},\"cuda\":\"13.0\",\"description\":\"Debian 12, CUDA 13 wheels, GDRCopy, aws-ofi-nccl (platform aws off) and nccl-tests built from source\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/nvidia/cuda/lib:/opt/gdrcopy/lib:/opt/nvidia/nccl/lib:/opt/aws-ofi-nccl/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"PATH\",\"origin\":\"layout\",\"reason\":\"component tools (mpirun, fi_info, nccl-tests)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/gdrcopy/bin:/opt/nccl-tests/bin:\${PATH}\"},{\"name\":\"SAGEMAKER_PROGRAM\",\"origin\":\"training\",\"reason\":\"the script SageMaker's training toolkit runs\",\"source\":\"SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)\",\"value\":\"train.py\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_PROTO\",\"reason\":\"aws-ofi-nccl >= 1.6 forces Simple itself where needed; forcing a protocol disables LL/LL128 where they are safe and fast\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[],\"labels\":{\"org.efa-image-build.aws-ofi-nccl.version\":\"1.17.3\",\"org.efa-image-build.cuda-runtime.version\":\"13.0.96\",\"org.efa-image-build.cuda.version\":\"13.0\",\"org.efa-image-build.gdrcopy.version\":\"2.6\",\"org.efa-image-build.libfabric.version\":\"1.17.0\",\"org.efa-image-build.nccl-tests.version\":\"2.19.6\",\"org.efa-image-build.nccl.version\":\"2.27.7\",\"org.efa-image-build.openmpi.version\":\"4.1.4\",\"org.efa-image-build.variant\":\"local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6\",\"org.opencontainers.image.description\":\"Debian 12, CUDA 13 wheels, GDRCopy, aws-ofi-nccl (platform aws off) and nccl-tests built from source\",\"org.opencontainers.image.title\":\"local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6\",\"org.opencontainers.image.vendor\":\"efa-image-build example\"},\"matrix\":\"matrix.local.yaml\",\"name\":\"local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"ofi\"},\"packages\":[\"ca-certificates=20230311+deb12u1\",\"python3=3.11.2-1+b1\",\"rdma-core=44.0-2\",\"ibverbs-providers=44.0-2\",\"libhwloc15=2.9.0-1\"],\"platform\":\"linux/amd64\",\"python\":\"/usr/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"efa-image-build/local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6:local-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":true,\"source_dir\":\"examples/training\"}}"
