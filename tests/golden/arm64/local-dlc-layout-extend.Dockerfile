# Rendered by efa-image-build from matrix.local.yaml (variant local-dlc-layout-extend). Do not edit: change the matrix
# and run `build.py render`. Build context: build/local-dlc-layout-extend/context (artifacts/, validators/, training/).

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM localbase/dlc-layout:bookworm-2nccl-torch AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# No apt lists or downloads in any layer: the base's own go here, each apt step's below (apt_clean).
RUN rm -rf /var/cache/apt/* /var/lib/apt/lists/*
RUN --mount=type=cache,id=efa-image-build-apt-cache-debian12-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-debian12-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends \
      openssh-server=1:9.2p1-2+deb12u10 \
      openssh-client=1:9.2p1-2+deb12u10 \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }

# sshd for multi-node launches, as mpi-operator's images set it up: port 2222 on both sides (with host
# networking, 22 is the host's own sshd), StrictModes off (the operator mounts its key Secret on .ssh), host keys
# made by each container when it starts (/usr/local/sbin/efa-sshd), never one set shared by every container of the image;
# the privilege separation directory, pam_loginuid optional; the cluster-internal client asks about no host key.
RUN mkdir -p /var/run/sshd \
 && rm -f /etc/ssh/ssh_host_* \
 && if [ -f /etc/pam.d/sshd ]; then sed -i 's/^session\s*required\s*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd; fi \
 && printf '%s\n' 'Port 2222' 'StrictModes no' > /etc/ssh/sshd_config.d/efa-image-build.conf \
 && printf '%s\n' 'Host *' '    Port 2222' '    StrictHostKeyChecking no' '    UserKnownHostsFile /dev/null' > /etc/ssh/ssh_config.d/efa-image-build.conf \
 && printf '%s\n' '#!/bin/sh' '# this container'"'"'s host keys, then sshd in the foreground (mpi-operator workers, a node of mpirun)' 'ssh-keygen -A >/dev/null' 'exec /usr/sbin/sshd -De "$@"' > /usr/local/sbin/efa-sshd \
 && chmod 0755 /usr/local/sbin/efa-sshd \
 && ssh-keygen -q -t ed25519 -N '' -f /tmp/sshd-check-key \
 && /usr/sbin/sshd -t -h /tmp/sshd-check-key \
 && /usr/sbin/sshd -T -h /tmp/sshd-check-key | grep -x 'port 2222' >/dev/null \
 && /usr/sbin/sshd -T -h /tmp/sshd-check-key | grep -x 'strictmodes no' >/dev/null \
 && rm -f /tmp/sshd-check-key /tmp/sshd-check-key.pub

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM system AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN printf '%s\n' /opt/amazon/efa/lib /opt/amazon/openmpi/lib > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env local-dlc-layout-extend` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/amazon/efa/lib:/opt/amazon/openmpi/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ENV PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:${PATH}"
# validators: `/usr/local/bin/python3 -m efa_validators --help`
COPY validators /opt/efa-image-build/efa_validators
RUN /usr/local/bin/python3 -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"]).mkdir(parents=True, exist_ok=True); pathlib.Path(sysconfig.get_paths()["purelib"], "efa-image-build.pth").write_text("/opt/efa-image-build\n")' \
 && /usr/local/bin/python3 -m compileall -q /opt/efa-image-build/efa_validators \
 && /usr/local/bin/python3 -c 'import efa_validators'
# training code (SageMaker layout: /opt/ml/code, SAGEMAKER_PROGRAM)
COPY training /opt/ml/code
WORKDIR /opt/ml/code

# The lock inside the image too: node-check reads it on the cluster, where labels are out of reach.
COPY variant.lock.json /opt/efa-image-build/variant.lock.json
LABEL org.efa-image-build.cuda.version="12.8" \
      org.efa-image-build.libfabric.version="1.17.0" \
      org.efa-image-build.nccl.version="2.27.7" \
      org.efa-image-build.openmpi.version="4.1.4" \
      org.efa-image-build.openssh.version="9.2p1" \
      org.efa-image-build.variant="local-dlc-layout-extend" \
      org.opencontainers.image.description="the local DLC-layout base extended with sshd, the validators and the training code" \
      org.opencontainers.image.title="local-dlc-layout-extend" \
      org.opencontainers.image.vendor="efa-image-build example" \
      org.efa-image-build.lock="{\"axes\":{},\"base\":{\"digest\":null,\"image\":\"localbase/dlc-layout:bookworm-2nccl-torch\",\"kind\":\"dlc\",\"os\":\"debian12\",\"registry_arg\":null,\"runtime_image\":null},\"build_steps\":[],\"components\":{\"libfabric\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/efa\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"1.17.0\"},\"nccl\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/usr/local/lib/python3.11/site-packages/nvidia/nccl\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"2.27.7\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/openmpi\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"4.1.4\"},\"openssh\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"apt\",\"packages\":[\"openssh-server=1:9.2p1-2+deb12u10\",\"openssh-client=1:9.2p1-2+deb12u10\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"9.2p1\"}},\"cuda\":\"12.8\",\"description\":\"the local DLC-layout base extended with sshd, the validators and the training code\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/efa/lib:/opt/amazon/openmpi/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"PATH\",\"origin\":\"layout\",\"reason\":\"component tools (mpirun, fi_info, nccl-tests)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:\${PATH}\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[],\"labels\":{\"org.efa-image-build.cuda.version\":\"12.8\",\"org.efa-image-build.libfabric.version\":\"1.17.0\",\"org.efa-image-build.nccl.version\":\"2.27.7\",\"org.efa-image-build.openmpi.version\":\"4.1.4\",\"org.efa-image-build.openssh.version\":\"9.2p1\",\"org.efa-image-build.variant\":\"local-dlc-layout-extend\",\"org.opencontainers.image.description\":\"the local DLC-layout base extended with sshd, the validators and the training code\",\"org.opencontainers.image.title\":\"local-dlc-layout-extend\",\"org.opencontainers.image.vendor\":\"efa-image-build example\"},\"matrix\":\"matrix.local.yaml\",\"name\":\"local-dlc-layout-extend\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"socket\"},\"packages\":[],\"platform\":\"linux/arm64\",\"python\":\"/usr/local/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"efa-image-build/local-dlc-layout-extend:local-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":false,\"source_dir\":\"examples/training\"}}"
