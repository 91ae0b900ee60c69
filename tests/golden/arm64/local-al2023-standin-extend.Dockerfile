# Rendered by efa-image-build from matrix.local.yaml (variant local-al2023-standin-extend). Do not edit: change the matrix
# and run `build.py render`. Build context: build/local-al2023-standin-extend/context (artifacts/, validators/, training/).

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM localbase/al2023-dlc-layout:standin-bookworm-sshd AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# No dnf metadata or downloads in any layer: the base's own go here, each dnf step's below (dnf_clean).
RUN rm -rf /var/cache/dnf/* /var/cache/yum/*

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

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM system AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN printf '%s\n' /opt/amazon/efa/lib /opt/amazon/efa/lib64 /opt/amazon/openmpi/lib /opt/amazon/openmpi/lib64 > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env local-al2023-standin-extend` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/amazon/efa/lib:/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib:/opt/amazon/openmpi/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ENV PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:${PATH}"
# validators: `/opt/venv/bin/python -m efa_validators --help`
COPY validators /opt/efa-image-build/efa_validators
RUN /opt/venv/bin/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"]).mkdir(parents=True, exist_ok=True); pathlib.Path(sysconfig.get_paths()["purelib"], "efa-image-build.pth").write_text("/opt/efa-image-build\n")' \
 && /opt/venv/bin/python -m compileall -q /opt/efa-image-build/efa_validators \
 && /opt/venv/bin/python -c 'import efa_validators'
# training code (SageMaker layout: /opt/ml/code, SAGEMAKER_PROGRAM)
COPY training /opt/ml/code
WORKDIR /opt/ml/code

# The lock inside the image too: node-check reads it on the cluster, where labels are out of reach.
COPY variant.lock.json /opt/efa-image-build/variant.lock.json
LABEL org.efa-image-build.cuda.version="13.0" \
      org.efa-image-build.libfabric.version="1.17.0" \
      org.efa-image-build.nccl.version="2.27.7" \
      org.efa-image-build.openmpi.version="4.1.4" \
      org.efa-image-build.openssh.version="9.2p1" \
      org.efa-image-build.variant="local-al2023-standin-extend" \
      org.opencontainers.image.description="the local AL2023-layout stand-in extended with the validators and the training code" \
      org.opencontainers.image.title="local-al2023-standin-extend" \
      org.opencontainers.image.vendor="efa-image-build example" \
      org.efa-image-build.lock="{\"axes\":{},\"base\":{\"digest\":null,\"image\":\"localbase/al2023-dlc-layout:standin-bookworm-sshd\",\"kind\":\"dlc\",\"os\":\"amzn2023\",\"registry_arg\":null,\"runtime_image\":null},\"build_steps\":[],\"components\":{\"libfabric\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/efa\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"1.17.0\"},\"nccl\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/venv/lib/python3.11/site-packages/nvidia/nccl\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"2.27.7\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/openmpi\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"4.1.4\"},\"openssh\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"base\",\"packages\":[],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"base\",\"url\":null,\"version\":\"9.2p1\"}},\"cuda\":\"13.0\",\"description\":\"the local AL2023-layout stand-in extended with the validators and the training code\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/efa/lib:/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib:/opt/amazon/openmpi/lib64\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"PATH\",\"origin\":\"layout\",\"reason\":\"component tools (mpirun, fi_info, nccl-tests)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:\${PATH}\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[],\"labels\":{\"org.efa-image-build.cuda.version\":\"13.0\",\"org.efa-image-build.libfabric.version\":\"1.17.0\",\"org.efa-image-build.nccl.version\":\"2.27.7\",\"org.efa-image-build.openmpi.version\":\"4.1.4\",\"org.efa-image-build.openssh.version\":\"9.2p1\",\"org.efa-image-build.variant\":\"local-al2023-standin-extend\",\"org.opencontainers.image.description\":\"the local AL2023-layout stand-in extended with the validators and the training code\",\"org.opencontainers.image.title\":\"local-al2023-standin-extend\",\"org.opencontainers.image.vendor\":\"efa-image-build example\"},\"matrix\":\"matrix.local.yaml\",\"name\":\"local-al2023-standin-extend\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"90\",\"jobs\":0,\"nccl_net\":\"socket\"},\"packages\":[],\"platform\":\"linux/arm64\",\"python\":\"/opt/venv/bin/python\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"efa-image-build/local-al2023-standin-extend:local-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":false,\"source_dir\":\"examples/training\"}}"
