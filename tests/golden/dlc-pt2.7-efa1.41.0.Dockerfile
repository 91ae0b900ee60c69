# Rendered by efa-image-build from matrix.yaml (variant dlc-pt2.7-efa1.41.0). Do not edit: change the matrix
# and run `build.py render`. Build context: build/dlc-pt2.7-efa1.41.0/context (artifacts/, validators/, training/).
# The registry host is deployment configuration: pass --build-arg BASE_REGISTRY=<host>.
ARG BASE_REGISTRY

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM ${BASE_REGISTRY}/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# No apt lists or downloads in any layer: the base's own go here, each apt step's below (apt_clean).
RUN rm -rf /var/cache/apt/* /var/lib/apt/lists/*

# The base's own sshd keeps its setup (a DLC's: port 22, its keys) but not StrictModes: mpi-operator mounts its
# key Secret on .ssh, whose ownership and modes StrictModes refuses ("Authentication refused: bad ownership or
# modes"). The first value sshd reads wins, so `StrictModes no` goes first in its config, any other line of it out.
RUN test -f /etc/ssh/sshd_config && mkdir -p /var/run/sshd \
 && { printf '%s\n' 'StrictModes no'; grep -iv '^[[:space:]]*strictmodes[[:space:]]' /etc/ssh/sshd_config || true; } > /tmp/sshd_config.new \
 && cat /tmp/sshd_config.new > /etc/ssh/sshd_config && rm -f /tmp/sshd_config.new \
 && ssh-keygen -q -t ed25519 -N '' -f /tmp/sshd-check-key \
 && /usr/sbin/sshd -t -h /tmp/sshd-check-key \
 && /usr/sbin/sshd -T -h /tmp/sshd-check-key | grep -x 'strictmodes no' >/dev/null \
 && rm -f /tmp/sshd-check-key /tmp/sshd-check-key.pub

# ---- EFA installer 1.41.0: verify (builder-only stage) -------------------------------------
FROM system AS efa-verify
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends gnupg ca-certificates \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
COPY artifacts/aws-efa-installer-1.41.0.tar.gz artifacts/aws-efa-installer-1.41.0.tar.gz.sig artifacts/aws-efa-installer.key /tmp/efa/
WORKDIR /tmp/efa
RUN echo '3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f  aws-efa-installer-1.41.0.tar.gz' | sha256sum -c - \
 && export GNUPGHOME=/tmp/efa/gnupg && mkdir -m 700 "$GNUPGHOME" \
 && gpg --batch --quiet --import aws-efa-installer.key \
 && gpg --batch --export 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC > only-pinned-key.gpg \
 && test -s only-pinned-key.gpg \
 && gpgv --keyring /tmp/efa/only-pinned-key.gpg aws-efa-installer-1.41.0.tar.gz.sig aws-efa-installer-1.41.0.tar.gz \
 && tar -xzf aws-efa-installer-1.41.0.tar.gz

# ---- EFA installer 1.41.0: install --------------------------------------------------------
FROM system AS efa
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=efa-verify /tmp/efa/aws-efa-installer /tmp/aws-efa-installer
WORKDIR /tmp/aws-efa-installer
# Over a DLC's own installer (params.reinstall: yes): its root mpirun wrapper and mca params are kept.
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && kept=/tmp/efa-image-build-dlc-kept && mkdir -p "$kept" \
 && if [ -e /opt/amazon/openmpi/bin/mpirun.real ]; then cp -a /opt/amazon/openmpi/bin/mpirun "$kept/mpirun"; fi \
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4 \
 && if [ -f "$kept/mpirun" ] && [ -e /opt/amazon/openmpi/bin/mpirun ] && ! cmp -s "$kept/mpirun" /opt/amazon/openmpi/bin/mpirun; then \
      mv -f /opt/amazon/openmpi/bin/mpirun /opt/amazon/openmpi/bin/mpirun.real && cp -a "$kept/mpirun" /opt/amazon/openmpi/bin/mpirun; fi \
 && rm -rf "$kept" \
 && mkdir -p "$(dirname /opt/amazon/openmpi/etc/openmpi-mca-params.conf)" && touch /opt/amazon/openmpi/etc/openmpi-mca-params.conf \
 && { [ -z "$(tail -c1 /opt/amazon/openmpi/etc/openmpi-mca-params.conf)" ] || echo >> /opt/amazon/openmpi/etc/openmpi-mca-params.conf; } \
 && { grep -qxF 'hwloc_base_binding_policy = none' /opt/amazon/openmpi/etc/openmpi-mca-params.conf || echo 'hwloc_base_binding_policy = none' >> /opt/amazon/openmpi/etc/openmpi-mca-params.conf; } \
 && { grep -qxF 'rmaps_base_mapping_policy = slot' /opt/amazon/openmpi/etc/openmpi-mca-params.conf || echo 'rmaps_base_mapping_policy = slot' >> /opt/amazon/openmpi/etc/openmpi-mca-params.conf; } \
 && rm -rf /tmp/aws-efa-installer \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
WORKDIR /


# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM efa AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN printf '%s\n' /opt/amazon/openmpi/lib /opt/amazon/efa/lib /opt/amazon/ofi-nccl/lib /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env dlc-pt2.7-efa1.41.0` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib64:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ENV PATH="/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:${PATH}"
# validators: `/usr/local/bin/python3 -m efa_validators --help`
COPY validators /opt/efa-image-build/efa_validators
RUN /usr/local/bin/python3 -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"]).mkdir(parents=True, exist_ok=True); pathlib.Path(sysconfig.get_paths()["purelib"], "efa-image-build.pth").write_text("/opt/efa-image-build\n")' \
 && /usr/local/bin/python3 -m compileall -q /opt/efa-image-build/efa_validators \
 && /usr/local/bin/python3 -c 'import efa_validators'
# training code (SageMaker layout: /opt/ml/code, SAGEMAKER_PROGRAM)
COPY training /opt/ml/code
WORKDIR /opt/ml/code
ENV SAGEMAKER_PROGRAM="train.py" \
    SAGEMAKER_SUBMIT_DIRECTORY="/opt/ml/code"

# The lock inside the image too: node-check reads it on the cluster, where labels are out of reach.
COPY variant.lock.json /opt/efa-image-build/variant.lock.json
LABEL org.efa-image-build.aws-ofi-nccl.version="1.14.2" \
      org.efa-image-build.cuda.version="12.8" \
      org.efa-image-build.efa-installer.version="1.41.0" \
      org.efa-image-build.libfabric.version="2.1.0" \
      org.efa-image-build.nccl.version="2.26.2" \
      org.efa-image-build.openmpi.version="4.1.7" \
      org.efa-image-build.openssh.version="8.9p1" \
      org.efa-image-build.torch.version="2.7.1" \
      org.efa-image-build.variant="dlc-pt2.7-efa1.41.0" \
      org.opencontainers.image.description="AWS DLC PyTorch 2.7 training image with a newer EFA installer" \
      org.opencontainers.image.title="dlc-pt2.7-efa1.41.0" \
      org.opencontainers.image.vendor="Example ML platform team" \
      org.efa-image-build.lock="{\"axes\":{\"efa\":\"1.41.0\"},\"base\":{\"digest\":null,\"image\":\"pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker\",\"kind\":\"dlc\",\"os\":\"ubuntu22.04\",\"registry_arg\":\"BASE_REGISTRY\",\"runtime_image\":null},\"build_steps\":[],\"components\":{\"aws_ofi_nccl\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{\"platform_aws\":\"yes\"},\"prefix\":\"/opt/amazon/ofi-nccl\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"1.14.2\"},\"efa_installer\":{\"artifacts\":[{\"filename\":\"aws-efa-installer-1.41.0.tar.gz\",\"gpg_fingerprint\":\"4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC\",\"key_file\":\"aws-efa-installer.key\",\"key_url\":\"https://efa-installer.amazonaws.com/aws-efa-installer.key\",\"kind\":\"url\",\"sha256\":\"3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f\",\"signature_file\":\"aws-efa-installer-1.41.0.tar.gz.sig\",\"signature_url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.41.0.tar.gz.sig\",\"source\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.41.0.tar.gz\",\"url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.41.0.tar.gz\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{\"openmpi\":\"4\",\"reinstall\":\"yes\"},\"prefix\":\"/opt/amazon/efa\",\"sha256\":\"3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f\",\"source\":\"url\",\"url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.41.0.tar.gz\",\"version\":\"1.41.0\"},\"libfabric\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/efa\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"2.1.0\"},\"nccl\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/usr/local/lib/python3.12/site-packages/nvidia/nccl\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"2.26.2\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/openmpi\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"4.1.7\"},\"openssh\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"8.9p1\"},\"torch\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":null,\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"2.7.1\"}},\"cuda\":\"12.8\",\"description\":\"AWS DLC PyTorch 2.7 training image with a newer EFA installer\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib64:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"PATH\",\"origin\":\"layout\",\"reason\":\"component tools (mpirun, fi_info, nccl-tests)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:\${PATH}\"},{\"name\":\"SAGEMAKER_PROGRAM\",\"origin\":\"training\",\"reason\":\"the script SageMaker's training toolkit runs\",\"source\":\"SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)\",\"value\":\"train.py\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_PROTO\",\"reason\":\"aws-ofi-nccl >= 1.6 forces Simple itself where needed; forcing a protocol disables LL/LL128 where they are safe and fast\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[\"p5.48xlarge\",\"p5en.48xlarge\"],\"labels\":{\"org.efa-image-build.aws-ofi-nccl.version\":\"1.14.2\",\"org.efa-image-build.cuda.version\":\"12.8\",\"org.efa-image-build.efa-installer.version\":\"1.41.0\",\"org.efa-image-build.libfabric.version\":\"2.1.0\",\"org.efa-image-build.nccl.version\":\"2.26.2\",\"org.efa-image-build.openmpi.version\":\"4.1.7\",\"org.efa-image-build.openssh.version\":\"8.9p1\",\"org.efa-image-build.torch.version\":\"2.7.1\",\"org.efa-image-build.variant\":\"dlc-pt2.7-efa1.41.0\",\"org.opencontainers.image.description\":\"AWS DLC PyTorch 2.7 training image with a newer EFA installer\",\"org.opencontainers.image.title\":\"dlc-pt2.7-efa1.41.0\",\"org.opencontainers.image.vendor\":\"Example ML platform team\"},\"matrix\":\"matrix.yaml\",\"name\":\"dlc-pt2.7-efa1.41.0\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"ofi\"},\"packages\":[],\"platform\":\"linux/amd64\",\"python\":\"/usr/local/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"ml-platform/training:dlc-pt2.7-efa1.41.0-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":true,\"source_dir\":\"examples/training\"}}"
