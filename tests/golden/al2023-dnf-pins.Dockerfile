# Rendered by efa-image-build from al2023-dnf.yaml (variant al2023-dnf-pins). Do not edit: change the matrix
# and run `build.py render`. Build context: build/al2023-dnf-pins/context (artifacts/, validators/, training/).

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM nvidia/cuda:13.0.2-runtime-amzn2023 AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# No dnf metadata or downloads in any layer: the base's own go here, each dnf step's below (dnf_clean).
RUN rm -rf /var/cache/dnf/* /var/cache/yum/*
# Exact rpm pins (python3.12, openssh-server, perl-interpreter): checked with rpm -q after the
# install and recorded in /opt/efa-image-build/resolved-packages.json; another build installed fails this step.
# Unpinned in the matrix (pin them for reproducible images): which
# hadolint ignore=DL3041
RUN --mount=type=cache,id=efa-image-build-dnf-cache-amzn2023-linux-amd64,target=/var/cache/dnf,sharing=locked \
    dnf install -y --setopt=install_weak_deps=False \
      python3.12-3.12.12-1.amzn2023.0.1 \
      openssh-server-8.7p1-8.amzn2023.0.15 \
      perl-interpreter-4:5.32.1-477.amzn2023.0.7 \
      which \
 && rpm_evr() { rpm -q --qf '%|EPOCH?{%{EPOCH}:}|%{VERSION}-%{RELEASE}' "$1"; } \
 && rpm_verify() { have="$(rpm_evr "$1")"; if [ "$have" != "$2" ]; then echo "error: $1 $have is installed, the pin $3 wants $2" >&2; return 1; fi; } \
 && rpm_record() { printf '{"component": "%s", "package": "%s", "pin": "%s", "version": "%s"}' "$1" "$2" "$3" "$(rpm_evr "$2")"; } \
 && rpm_verify python3.12 3.12.12-1.amzn2023.0.1 python3.12=3.12.12-1.amzn2023.0.1 \
 && rpm_verify openssh-server 8.7p1-8.amzn2023.0.15 openssh-server=8.7p1-8.amzn2023.0.15 \
 && rpm_verify perl-interpreter 4:5.32.1-477.amzn2023.0.7 perl-interpreter=4:5.32.1-477.amzn2023.0.7 \
 && mkdir -p /opt/efa-image-build \
 && { printf '{"packages": ['; rpm_record packages python3.12 python3.12=3.12.12-1.amzn2023.0.1; printf ', '; rpm_record packages openssh-server openssh-server=8.7p1-8.amzn2023.0.15; printf ', '; rpm_record packages perl-interpreter perl-interpreter=4:5.32.1-477.amzn2023.0.7; printf ']}\n'; } > /opt/efa-image-build/resolved-packages.json \
 && { grep -qs ' /var/cache/dnf ' /proc/mounts || { dnf clean all && rm -rf /var/cache/dnf/*; }; }


# ---- requirements: requirements.txt of the training code (network and build CA here only) ---------------
FROM system AS requirements
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# pip for this stage only (the image's Python has none); left to the base's mirror like the build tools.
# hadolint ignore=DL3041
RUN --mount=type=cache,id=efa-image-build-dnf-cache-amzn2023-linux-amd64,target=/var/cache/dnf,sharing=locked \
    dnf install -y --setopt=install_weak_deps=False python3-pip \
 && { grep -qs ' /var/cache/dnf ' /proc/mounts || { dnf clean all && rm -rf /var/cache/dnf/*; }; }
COPY training/requirements.txt /tmp/requirements/requirements.txt
# pip's downloads: a BuildKit cache mount (the classic builder leaves them in this stage, never in the image).
RUN --mount=type=cache,id=efa-image-build-pip-linux-amd64,target=/root/.cache/pip,sharing=locked \
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore /usr/bin/python3 -m pip install \
      --no-warn-script-location --root /tmp/requirements/root \
      -r /tmp/requirements/requirements.txt \
 && mkdir -p /tmp/requirements/root

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM system AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# validators: `/usr/bin/python3 -m efa_validators --help`
COPY validators /opt/efa-image-build/efa_validators
RUN /usr/bin/python3 -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"]).mkdir(parents=True, exist_ok=True); pathlib.Path(sysconfig.get_paths()["purelib"], "efa-image-build.pth").write_text("/opt/efa-image-build\n")' \
 && /usr/bin/python3 -m compileall -q /opt/efa-image-build/efa_validators \
 && /usr/bin/python3 -c 'import efa_validators'
# requirements.txt: the files pip added in the requirements stage
COPY --from=requirements /tmp/requirements/root/ /
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
LABEL org.efa-image-build.cuda.version="13.0" \
      org.efa-image-build.variant="al2023-dnf-pins" \
      org.opencontainers.image.description="dnf pins, an unpinned package and the pip stage on a CUDA AL2023 base" \
      org.opencontainers.image.title="al2023-dnf-pins" \
      org.efa-image-build.lock="{\"axes\":{},\"base\":{\"digest\":null,\"image\":\"nvidia/cuda:13.0.2-runtime-amzn2023\",\"kind\":\"cuda\",\"os\":\"amzn2023\",\"registry_arg\":null,\"runtime_image\":null},\"build_steps\":[],\"components\":{},\"cuda\":\"13.0\",\"description\":\"dnf pins, an unpinned package and the pip stage on a CUDA AL2023 base\",\"env\":[{\"name\":\"SAGEMAKER_PROGRAM\",\"origin\":\"training\",\"reason\":\"the script SageMaker's training toolkit runs\",\"source\":\"SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)\",\"value\":\"train.py\"}],\"env_forbidden\":[{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[],\"labels\":{\"org.efa-image-build.cuda.version\":\"13.0\",\"org.efa-image-build.variant\":\"al2023-dnf-pins\",\"org.opencontainers.image.description\":\"dnf pins, an unpinned package and the pip stage on a CUDA AL2023 base\",\"org.opencontainers.image.title\":\"al2023-dnf-pins\"},\"matrix\":\"al2023-dnf.yaml\",\"name\":\"al2023-dnf-pins\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"socket\"},\"packages\":[\"python3.12=3.12.12-1.amzn2023.0.1\",\"openssh-server=8.7p1-8.amzn2023.0.15\",\"perl-interpreter=4:5.32.1-477.amzn2023.0.7\",\"which\"],\"platform\":\"linux/amd64\",\"python\":\"/usr/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":true,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":true,\"source_dir\":\"al2023-training\"}}"
