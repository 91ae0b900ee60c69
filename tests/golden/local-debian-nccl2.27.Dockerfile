# Rendered by efa-image-build from matrix.local.yaml (variant local-debian-nccl2.27). Do not edit: change the matrix
# and run `build.py render`. Build context: build/local-debian-nccl2.27/context (artifacts/, validators/, training/).

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
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }

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

# nccl 2.27.7 from the wheel nvidia-nccl-cu12==2.27.7
COPY artifacts/nvidia_nccl_cu12-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/artifacts/
RUN echo 'de5ba5562f08029a19cb1cd659404b18411ed0d6c90ac5f52f30bf99ad5809aa  /tmp/artifacts/nvidia_nccl_cu12-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl' | sha256sum -c - \
 && python3 -c 'import os, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [os.chmod(z.extract(i, sys.argv[2]), (i.external_attr >> 16) & 0o755 or 0o644) for i in z.infolist() if not i.is_dir()]' \
      /tmp/artifacts/nvidia_nccl_cu12-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl /tmp/wheel-nccl \
 && mkdir -p /opt/nvidia/nccl \
 && for d in /tmp/wheel-nccl/nvidia/*/; do cp -a "$d". /opt/nvidia/nccl/; done \
 && find /opt/nvidia/nccl -name '__init__.py' -delete \
 && for lib in /opt/nvidia/nccl/lib/*.so.*; do ln -sf "${lib##*/}" "${lib%%.so.*}.so"; done \
 && ln -s lib /opt/nvidia/nccl/lib64 \
 && rm -rf /tmp/wheel-nccl /tmp/artifacts/nvidia_nccl_cu12-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl

# Headers and static libraries stay in the builder: the runtime stage copies libraries and programs only.
RUN for d in /opt/nvidia/cuda /opt/nvidia/nccl; do rm -rf "$d/include"; find "$d" -name '*.a' -delete; done

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM system AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=builder /opt/nvidia/cuda /opt/nvidia/cuda
COPY --from=builder /opt/nvidia/nccl /opt/nvidia/nccl
RUN printf '%s\n' /opt/nvidia/cuda/lib /opt/nvidia/nccl/lib > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env local-debian-nccl2.27` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/nvidia/cuda/lib:/opt/nvidia/nccl/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
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
LABEL org.efa-image-build.cuda-runtime.version="12.8.90" \
      org.efa-image-build.cuda.version="12.8" \
      org.efa-image-build.libfabric.version="1.17.0" \
      org.efa-image-build.nccl.version="2.27.7" \
      org.efa-image-build.openmpi.version="4.1.4" \
      org.efa-image-build.variant="local-debian-nccl2.27" \
      org.opencontainers.image.description="Debian 12 with libfabric 1.17, Open MPI 4.1 and NCCL from the wheel (no EFA device)" \
      org.opencontainers.image.title="local-debian-nccl2.27" \
      org.opencontainers.image.vendor="efa-image-build example" \
      org.efa-image-build.lock="{\"axes\":{\"nccl\":\"2.27\"},\"base\":{\"digest\":null,\"image\":\"localbase/debian:bookworm-minbase\",\"kind\":\"local\",\"os\":\"debian12\",\"registry_arg\":null,\"runtime_image\":null},\"build_steps\":[],\"checks\":{\"entry-point-file\":{\"description\":\"the entry point is shipped read-only for others, owned by root, without debugger leftovers\",\"excluded_contents\":[\"^\\\\s*breakpoint\\\\(\\\\)\",\"^\\\\s*import pdb\"],\"expected_contents\":[\"^def main\\\\(\\\\) -> int:\$\"],\"path\":\"/opt/ml/code/train.py\",\"permissions\":\"-rw-r--r--\",\"uid\":0},\"sagemaker-code-dir\":{\"description\":\"SageMaker starts in /opt/ml/code and finds the code there\",\"metadata\":{\"env\":{\"SAGEMAKER_PROGRAM\":\"train.py\",\"SAGEMAKER_SUBMIT_DIRECTORY\":\"/opt/ml/code\"},\"workdir\":\"/opt/ml/code\"}},\"training-entry-point-runs\":{\"args\":[\"/opt/ml/code/train.py\"],\"command\":\"python3\",\"description\":\"the entry point SageMaker runs works in the image and writes its model file (no GPU)\",\"expected_error\":[\"torch not installed: skipping the all-reduce\"],\"expected_output\":[\"\\u0022world_size\\u0022: 1\"]}},\"components\":{\"cuda_runtime\":{\"artifacts\":[{\"filename\":\"nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-cuda-runtime-cu12==12.8.90\",\"sha256\":\"adade8dcbd0edf427b7204d480d6066d33902cab2a4707dcfc48a2d0fd44ab90\",\"source\":\"pypi:nvidia-cuda-runtime-cu12==12.8.90\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"wheel\",\"packages\":[],\"params\":{\"toolkit\":\"no\"},\"prefix\":\"/opt/nvidia/cuda\",\"sha256\":\"adade8dcbd0edf427b7204d480d6066d33902cab2a4707dcfc48a2d0fd44ab90\",\"source\":\"pypi\",\"url\":null,\"version\":\"12.8.90\"},\"libfabric\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[\"libfabric-dev=1.17.0-3\"],\"method\":\"apt\",\"packages\":[\"libfabric1=1.17.0-3\",\"libfabric-bin=1.17.0-3\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"1.17.0\"},\"nccl\":{\"artifacts\":[{\"filename\":\"nvidia_nccl_cu12-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl\",\"kind\":\"pypi\",\"requirement\":\"nvidia-nccl-cu12==2.27.7\",\"sha256\":\"de5ba5562f08029a19cb1cd659404b18411ed0d6c90ac5f52f30bf99ad5809aa\",\"source\":\"pypi:nvidia-nccl-cu12==2.27.7\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"wheel\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/nvidia/nccl\",\"sha256\":\"de5ba5562f08029a19cb1cd659404b18411ed0d6c90ac5f52f30bf99ad5809aa\",\"source\":\"pypi\",\"url\":null,\"version\":\"2.27.7\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[\"libopenmpi-dev=4.1.4-3+b1\"],\"method\":\"apt\",\"packages\":[\"openmpi-bin=4.1.4-3+b1\",\"libopenmpi3=4.1.4-3+b1\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"4.1.4\"}},\"cuda\":\"12.8\",\"description\":\"Debian 12 with libfabric 1.17, Open MPI 4.1 and NCCL from the wheel (no EFA device)\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/nvidia/cuda/lib:/opt/nvidia/nccl/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"SAGEMAKER_PROGRAM\",\"origin\":\"training\",\"reason\":\"the script SageMaker's training toolkit runs\",\"source\":\"SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)\",\"value\":\"train.py\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[],\"labels\":{\"org.efa-image-build.cuda-runtime.version\":\"12.8.90\",\"org.efa-image-build.cuda.version\":\"12.8\",\"org.efa-image-build.libfabric.version\":\"1.17.0\",\"org.efa-image-build.nccl.version\":\"2.27.7\",\"org.efa-image-build.openmpi.version\":\"4.1.4\",\"org.efa-image-build.variant\":\"local-debian-nccl2.27\",\"org.opencontainers.image.description\":\"Debian 12 with libfabric 1.17, Open MPI 4.1 and NCCL from the wheel (no EFA device)\",\"org.opencontainers.image.title\":\"local-debian-nccl2.27\",\"org.opencontainers.image.vendor\":\"efa-image-build example\"},\"matrix\":\"matrix.local.yaml\",\"name\":\"local-debian-nccl2.27\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"socket\"},\"packages\":[\"ca-certificates=20230311+deb12u1\",\"python3=3.11.2-1+b1\",\"rdma-core=44.0-2\",\"ibverbs-providers=44.0-2\",\"libhwloc15=2.9.0-1\"],\"platform\":\"linux/amd64\",\"python\":\"/usr/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"efa-image-build/local-debian-nccl2.27:local-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":true,\"source_dir\":\"examples/training\"}}"
