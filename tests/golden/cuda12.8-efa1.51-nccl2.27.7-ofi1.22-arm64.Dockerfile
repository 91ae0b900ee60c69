# Rendered by efa-image-build from matrix.yaml (variant cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64). Do not edit: change the matrix
# and run `build.py render`. Build context: build/cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64/context (artifacts/, validators/, training/).

# ---- system: base image and OS packages ------------------------------------------------------------------
FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04 AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# No apt lists or downloads in any layer: the base's own go here, each apt step's below (apt_clean).
RUN rm -rf /var/cache/apt/* /var/lib/apt/lists/*
# Pinned by upstream version (openssh-server=1:8.9p1-*, openssh-client=1:8.9p1-*): the archive's newest build of it is
# installed, checked and recorded in /opt/efa-image-build/resolved-packages.json; no build of it there fails this step.
# Unpinned in the matrix (pin them for reproducible images): python3, libhwloc15
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt_pick() { best=""; for ver in $(apt-cache madison "$1" | awk -F'|' -v want="$2" '{ v = $2; gsub(/ /, "", v); rest = substr(v, length(want) + 1); if (index(v, want) == 1 && rest != "" && index(rest, "-") == 0) print v }'); do if [ -z "$best" ] || dpkg --compare-versions "$ver" gt "$best"; then best="$ver"; fi; done; if [ -z "$best" ]; then echo "error: no build of $1 matches the pin $3 (any Debian revision of $2*); the archive has: $(apt-cache madison "$1" | awk -F'|' '{ gsub(/ /, "", $2); printf "%s ", $2 }')" >&2; return 1; fi; echo "$best"; } \
 && apt_verify() { have="$(dpkg-query -W -f='${Version}' "$1")"; if [ "$have" != "$2" ]; then echo "error: $1 $have is installed, the pin $3 resolved to $2" >&2; return 1; fi; } \
 && apt_record() { printf '{"component": "%s", "package": "%s", "pin": "%s", "version": "%s"}' "$1" "$2" "$3" "$(dpkg-query -W -f='${Version}' "$2")"; } \
 && pin_openssh_server="$(apt_pick openssh-server 1:8.9p1- 'openssh-server=1:8.9p1-*')" \
 && pin_openssh_client="$(apt_pick openssh-client 1:8.9p1- 'openssh-client=1:8.9p1-*')" \
 && apt-get install -y --no-install-recommends \
      python3 \
      libhwloc15 \
      openssh-server="$pin_openssh_server" \
      openssh-client="$pin_openssh_client" \
 && apt_verify openssh-server "$pin_openssh_server" 'openssh-server=1:8.9p1-*' \
 && apt_verify openssh-client "$pin_openssh_client" 'openssh-client=1:8.9p1-*' \
 && mkdir -p /opt/efa-image-build \
 && { printf '{"packages": ['; apt_record openssh openssh-server 'openssh-server=1:8.9p1-*'; printf ', '; apt_record openssh openssh-client 'openssh-client=1:8.9p1-*'; printf ']}\n'; } > /opt/efa-image-build/resolved-packages.json \
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
# One NCCL per image: nccl 2.27.7 comes from this build, so the base's NCCL packages go.
RUN { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' libnccl2 libnccl-dev 2>/dev/null || true; } \
      | awk '$1 ~ /^.i/ {print $2}' | xargs -r apt-get purge -y --allow-change-held-packages \
 && ldconfig

# ---- build-system: the same OS packages on the -devel image (CUDA toolkit, headers), for the builder ----------
FROM nvidia/cuda:12.8.1-devel-ubuntu22.04 AS build-system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# No apt lists or downloads in any layer: the base's own go here, each apt step's below (apt_clean).
RUN rm -rf /var/cache/apt/* /var/lib/apt/lists/*
# Pinned by upstream version (openssh-server=1:8.9p1-*, openssh-client=1:8.9p1-*): the archive's newest build of it is
# installed, checked and recorded in /opt/efa-image-build/resolved-packages.json; no build of it there fails this step.
# Unpinned in the matrix (pin them for reproducible images): python3, libhwloc15
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt_pick() { best=""; for ver in $(apt-cache madison "$1" | awk -F'|' -v want="$2" '{ v = $2; gsub(/ /, "", v); rest = substr(v, length(want) + 1); if (index(v, want) == 1 && rest != "" && index(rest, "-") == 0) print v }'); do if [ -z "$best" ] || dpkg --compare-versions "$ver" gt "$best"; then best="$ver"; fi; done; if [ -z "$best" ]; then echo "error: no build of $1 matches the pin $3 (any Debian revision of $2*); the archive has: $(apt-cache madison "$1" | awk -F'|' '{ gsub(/ /, "", $2); printf "%s ", $2 }')" >&2; return 1; fi; echo "$best"; } \
 && apt_verify() { have="$(dpkg-query -W -f='${Version}' "$1")"; if [ "$have" != "$2" ]; then echo "error: $1 $have is installed, the pin $3 resolved to $2" >&2; return 1; fi; } \
 && apt_record() { printf '{"component": "%s", "package": "%s", "pin": "%s", "version": "%s"}' "$1" "$2" "$3" "$(dpkg-query -W -f='${Version}' "$2")"; } \
 && pin_openssh_server="$(apt_pick openssh-server 1:8.9p1- 'openssh-server=1:8.9p1-*')" \
 && pin_openssh_client="$(apt_pick openssh-client 1:8.9p1- 'openssh-client=1:8.9p1-*')" \
 && apt-get install -y --no-install-recommends \
      python3 \
      libhwloc15 \
      openssh-server="$pin_openssh_server" \
      openssh-client="$pin_openssh_client" \
 && apt_verify openssh-server "$pin_openssh_server" 'openssh-server=1:8.9p1-*' \
 && apt_verify openssh-client "$pin_openssh_client" 'openssh-client=1:8.9p1-*' \
 && mkdir -p /opt/efa-image-build \
 && { printf '{"packages": ['; apt_record openssh openssh-server 'openssh-server=1:8.9p1-*'; printf ', '; apt_record openssh openssh-client 'openssh-client=1:8.9p1-*'; printf ']}\n'; } > /opt/efa-image-build/resolved-packages.json \
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
# One NCCL per image: nccl 2.27.7 comes from this build, so the base's NCCL packages go.
RUN { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' libnccl2 libnccl-dev 2>/dev/null || true; } \
      | awk '$1 ~ /^.i/ {print $2}' | xargs -r apt-get purge -y --allow-change-held-packages \
 && ldconfig

# ---- EFA installer 1.51.0: verify (builder-only stage) -------------------------------------
FROM system AS efa-verify
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends gnupg ca-certificates \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
COPY artifacts/SHA256SUMS artifacts/aws-efa-installer-1.51.0.tar.gz artifacts/aws-efa-installer-1.51.0.tar.gz.sig artifacts/aws-efa-installer.key /tmp/efa/
WORKDIR /tmp/efa
RUN awk -v f=aws-efa-installer-1.51.0.tar.gz '$2 == f' SHA256SUMS | sha256sum -c - \
 && export GNUPGHOME=/tmp/efa/gnupg && mkdir -m 700 "$GNUPGHOME" \
 && gpg --batch --quiet --import aws-efa-installer.key \
 && gpg --batch --export 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC > only-pinned-key.gpg \
 && test -s only-pinned-key.gpg \
 && gpgv --keyring /tmp/efa/only-pinned-key.gpg aws-efa-installer-1.51.0.tar.gz.sig aws-efa-installer-1.51.0.tar.gz \
 && tar -xzf aws-efa-installer-1.51.0.tar.gz

# ---- EFA installer 1.51.0: install --------------------------------------------------------
FROM system AS efa
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=efa-verify /tmp/efa/aws-efa-installer /tmp/aws-efa-installer
WORKDIR /tmp/aws-efa-installer
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4 --disable-build-ngc --disable-ngc \
 && rm -rf /tmp/aws-efa-installer \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
# The installer's plugin dlopen()s the unversioned libcudart.so, which this CUDA -runtime image lacks (its
# -devel twin has it): linked to the image's own libcudart.so.<major>, as the DLC does (efa_installers.yaml).
RUN test -e /usr/local/cuda/lib64/libcudart.so \
 || ln -s "$(find -H /usr/local/cuda/lib64 -maxdepth 1 -name 'libcudart.so.[0-9]*' -printf '%f\n' | sort -V | head -n 1)" /usr/local/cuda/lib64/libcudart.so \
 && test -e /usr/local/cuda/lib64/libcudart.so \
 && ldconfig
WORKDIR /

# ---- EFA installer 1.51.0: install (the builder's twin on build-system) --------------------------------------------------------
FROM build-system AS efa-build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=efa-verify /tmp/efa/aws-efa-installer /tmp/aws-efa-installer
WORKDIR /tmp/aws-efa-installer
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4 --disable-build-ngc --disable-ngc \
 && rm -rf /tmp/aws-efa-installer \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
WORKDIR /


# ---- builder: compilers, archives and sources live here only -------------------------------------------
FROM efa-build AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Build tools are builder-only and left to the base's mirror; pinned -dev packages match the runtime.
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-ubuntu22.04-linux-arm64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-ubuntu22.04-linux-arm64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && apt-get install -y --no-install-recommends \
      git \
      make \
      gcc \
      g++ \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
# Files pinned by commit or signature are checked against the build host's SHA256SUMS (made after it verified
# the commit or the GPG signature); files with a pinned sha256 are checked against the pin itself.
COPY artifacts/SHA256SUMS /tmp/artifacts/SHA256SUMS

# gdrcopy 2.6 from source (git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d)
COPY artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar /tmp/artifacts/
RUN awk -v f=gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar)" = 93c606bbcaa10457cbbab93163aa446d902b983d \
 && mkdir -p /tmp/src/gdrcopy \
 && tar -xf /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar --strip-components=1 -C /tmp/src/gdrcopy \
 && rm /tmp/artifacts/gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar
WORKDIR /tmp/src/gdrcopy
RUN mkdir -p /tmp/cuda-stub \
 && gcc -E -P -I/usr/local/cuda/include /usr/local/cuda/include/cuda.h | tr '\n' ' ' | sed 's/;/;\n/g' \
  | sed -nE 's/^[[:space:]]*(extern[[:space:]]+)?CUresult[[:space:]]+(cu[A-Za-z0-9_]+)[[:space:]]*\(.*/int \2(void) { return 999; }/p' \
  | sort -u > /tmp/cuda-stub/libcuda.c \
 && test "$(wc -l < /tmp/cuda-stub/libcuda.c)" -gt 100 \
 && gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /tmp/cuda-stub/libcuda.so /tmp/cuda-stub/libcuda.c \
 && LIBRARY_PATH=/tmp/cuda-stub make -j"$(nproc)" prefix=/opt/gdrcopy CUDA=/usr/local/cuda \
      lib lib_install exes exes_install \
 && rm -rf /tmp/src/gdrcopy /tmp/cuda-stub
WORKDIR /
# nccl 2.27.7 from source (git+https://github.com/NVIDIA/nccl.git@593de54e52679b51428571c13271e2ea9f91b1b1)
COPY artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar /tmp/artifacts/
RUN awk -v f=nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar -v d=/tmp/artifacts '$2 == f {print $1 "  " d "/" $2}' /tmp/artifacts/SHA256SUMS | sha256sum -c - \
 && test "$(git get-tar-commit-id < /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar)" = 593de54e52679b51428571c13271e2ea9f91b1b1 \
 && mkdir -p /tmp/src/nccl \
 && tar -xf /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar --strip-components=1 -C /tmp/src/nccl \
 && rm /tmp/artifacts/nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar
WORKDIR /tmp/src/nccl
RUN make -j"$(nproc)" src.build PREFIX=/opt/nvidia/nccl CUDA_HOME=/usr/local/cuda \
      NVCC_GENCODE=-gencode=arch=compute_100,code=sm_100 \
 && make src.install PREFIX=/opt/nvidia/nccl \
 && rm -rf /tmp/src/nccl
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
      MPI=1 MPI_HOME=/opt/amazon/openmpi \
      NCCL_HOME=/opt/nvidia/nccl CUDA_HOME=/usr/local/cuda \
      NVCC_GENCODE=-gencode=arch=compute_100,code=sm_100 BUILDDIR=/tmp/nccl-tests-build \
 && mkdir -p /opt/nccl-tests/bin \
 && cp /tmp/nccl-tests-build/*_perf /opt/nccl-tests/bin/ \
 && rm -rf /tmp/src/nccl_tests /tmp/nccl-tests-build
WORKDIR /
# Headers and static libraries stay in the builder: the runtime stage copies libraries and programs only.
RUN for d in /opt/gdrcopy /opt/nvidia/nccl /opt/nccl-tests; do rm -rf "$d/include"; find "$d" -name '*.a' -delete; done

# ---- runtime: only what the job needs -------------------------------------------------------------------
FROM efa AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=builder /opt/gdrcopy /opt/gdrcopy
COPY --from=builder /opt/nvidia/nccl /opt/nvidia/nccl
COPY --from=builder /opt/nccl-tests /opt/nccl-tests
RUN printf '%s\n' /opt/amazon/openmpi/lib /opt/amazon/efa/lib /opt/gdrcopy/lib /opt/nvidia/nccl/lib /opt/amazon/ofi-nccl/lib /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib/aarch64-linux-gnu > /etc/ld.so.conf.d/efa-image-build.conf \
 && ldconfig
# Environment: `build.py explain-env cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64` says why each one is set.
ENV NCCL_SOCKET_IFNAME="^docker,lo,veth,virbr"
ENV LD_LIBRARY_PATH="/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/gdrcopy/lib:/opt/nvidia/nccl/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib64:/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ENV PATH="/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/opt/gdrcopy/bin:/opt/nccl-tests/bin:${PATH}"
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
LABEL org.efa-image-build.aws-ofi-nccl.version="1.22.0" \
      org.efa-image-build.cuda.version="12.8" \
      org.efa-image-build.efa-installer.version="1.51.0" \
      org.efa-image-build.gdrcopy.version="2.6" \
      org.efa-image-build.libfabric.version="2.7.0" \
      org.efa-image-build.nccl-tests.version="2.19.6" \
      org.efa-image-build.nccl.version="2.27.7" \
      org.efa-image-build.openmpi.version="4.1.8" \
      org.efa-image-build.openssh.version="8.9p1" \
      org.efa-image-build.variant="cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64" \
      org.opencontainers.image.description="Grace Blackwell p6e-gb200 (arm64) with EFA 1.51 and its aws-ofi-nccl 1.22.0, NCCL 2.27.7 from source" \
      org.opencontainers.image.title="cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64" \
      org.opencontainers.image.vendor="Example ML platform team" \
      org.efa-image-build.lock="{\"axes\":{},\"base\":{\"digest\":null,\"image\":\"nvidia/cuda:12.8.1-devel-ubuntu22.04\",\"kind\":\"cuda\",\"os\":\"ubuntu22.04\",\"registry_arg\":null,\"runtime_image\":\"nvidia/cuda:12.8.1-runtime-ubuntu22.04\"},\"build_steps\":[],\"components\":{\"aws_ofi_nccl\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{\"platform_aws\":\"yes\"},\"prefix\":\"/opt/amazon/ofi-nccl\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"1.22.0\"},\"efa_installer\":{\"artifacts\":[{\"filename\":\"aws-efa-installer-1.51.0.tar.gz\",\"gpg_fingerprint\":\"4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC\",\"key_file\":\"aws-efa-installer.key\",\"key_url\":\"https://efa-installer.amazonaws.com/aws-efa-installer.key\",\"kind\":\"url\",\"sha256\":null,\"signature_file\":\"aws-efa-installer-1.51.0.tar.gz.sig\",\"signature_url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz.sig\",\"source\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz\",\"url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz\"}],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{\"openmpi\":\"4\",\"reinstall\":\"no\"},\"prefix\":\"/opt/amazon/efa\",\"sha256\":null,\"source\":\"url\",\"url\":\"https://efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz\",\"version\":\"1.51.0\"},\"gdrcopy\":{\"artifacts\":[{\"commit\":\"93c606bbcaa10457cbbab93163aa446d902b983d\",\"filename\":\"gdrcopy-93c606bbcaa10457cbbab93163aa446d902b983d.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/NVIDIA/gdrcopy.git@93c606bbcaa10457cbbab93163aa446d902b983d\",\"url\":\"https://github.com/NVIDIA/gdrcopy.git\"}],\"bundled_by\":null,\"commit\":\"93c606bbcaa10457cbbab93163aa446d902b983d\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{\"tests\":\"yes\"},\"prefix\":\"/opt/gdrcopy\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/NVIDIA/gdrcopy.git\",\"version\":\"2.6\"},\"libfabric\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/efa\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"2.7.0\"},\"nccl\":{\"artifacts\":[{\"commit\":\"593de54e52679b51428571c13271e2ea9f91b1b1\",\"filename\":\"nccl-593de54e52679b51428571c13271e2ea9f91b1b1.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/NVIDIA/nccl.git@593de54e52679b51428571c13271e2ea9f91b1b1\",\"url\":\"https://github.com/NVIDIA/nccl.git\"}],\"bundled_by\":null,\"commit\":\"593de54e52679b51428571c13271e2ea9f91b1b1\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/nvidia/nccl\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/NVIDIA/nccl.git\",\"version\":\"2.27.7\"},\"nccl_tests\":{\"artifacts\":[{\"commit\":\"a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"filename\":\"nccl-tests-a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar\",\"kind\":\"git\",\"sha256\":null,\"source\":\"git+https://github.com/NVIDIA/nccl-tests.git@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"url\":\"https://github.com/NVIDIA/nccl-tests.git\"}],\"bundled_by\":null,\"commit\":\"a0b82b2260cf5152b9f8c061bbf7eaf0ba096432\",\"dev_packages\":[],\"method\":\"source\",\"packages\":[],\"params\":{\"mpi\":\"1\"},\"prefix\":\"/opt/nccl-tests\",\"sha256\":null,\"source\":\"git\",\"url\":\"https://github.com/NVIDIA/nccl-tests.git\",\"version\":\"2.19.6\"},\"openmpi\":{\"artifacts\":[],\"bundled_by\":\"efa_installer\",\"commit\":null,\"dev_packages\":[],\"method\":\"installer\",\"packages\":[],\"params\":{},\"prefix\":\"/opt/amazon/openmpi\",\"sha256\":null,\"source\":\"installer\",\"url\":null,\"version\":\"4.1.8\"},\"openssh\":{\"artifacts\":[],\"bundled_by\":null,\"commit\":null,\"dev_packages\":[],\"method\":\"apt\",\"packages\":[\"openssh-server=1:8.9p1-*\",\"openssh-client=1:8.9p1-*\"],\"params\":{},\"prefix\":\"/usr\",\"sha256\":null,\"source\":\"apt\",\"url\":null,\"version\":\"8.9p1\"}},\"cuda\":\"12.8\",\"description\":\"Grace Blackwell p6e-gb200 (arm64) with EFA 1.51 and its aws-ofi-nccl 1.22.0, NCCL 2.27.7 from source\",\"env\":[{\"name\":\"NCCL_SOCKET_IFNAME\",\"origin\":\"policy\",\"overridable\":true,\"reason\":\"NCCL's bootstrap and socket transport pick IP interfaces by name; left alone NCCL skips only docker* and lo (and virbr* from 2.28.3), so on a node with container networking it may pick a veth* that other nodes cannot reach. A leading ^ excludes by prefix: docker*, lo, veth* (as awsome-distributed-training's images set it) and virbr* (NCCL's own default since 2.28.3, which the variable would otherwise drop). With the variable set NCCL finds or fails: a container with only lo needs NCCL_SOCKET_IFNAME=lo\",\"source\":\"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile (commit 9636cb16: NCCL_SOCKET_IFNAME=^docker,lo,veth); NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (v2.27.7-1: default ^docker,lo; v2.28.3-1: ^docker,lo,virbr) and docs/userguide/source/env.rst (^ excludes by prefix, = matches exactly); aws/deep-learning-containers scripts/docker/common/install_efa.sh (commit e0ecedea: ^docker0,lo in /etc/nccl.conf)\",\"value\":\"^docker,lo,veth,virbr\"},{\"name\":\"LD_LIBRARY_PATH\",\"origin\":\"layout\",\"reason\":\"component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/gdrcopy/lib:/opt/nvidia/nccl/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib64:/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}\"},{\"name\":\"PATH\",\"origin\":\"layout\",\"reason\":\"component tools (mpirun, fi_info, nccl-tests)\",\"source\":\"component layout (imagebuild/catalog)\",\"value\":\"/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/opt/gdrcopy/bin:/opt/nccl-tests/bin:\${PATH}\"},{\"name\":\"SAGEMAKER_PROGRAM\",\"origin\":\"training\",\"reason\":\"the script SageMaker's training toolkit runs\",\"source\":\"SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)\",\"value\":\"train.py\"}],\"env_forbidden\":[{\"name\":\"NCCL_ALGO\",\"reason\":\"from NCCL 2.12 (the floor AWS's guidance for this project sets) NCCL's tuner picks the algorithm per size, node count and bandwidth, and on AWS aws-ofi-nccl's own tuner (on by default since 1.16.0) does; a forced algorithm makes the plugin's tuner fall back to NCCL's (1.17.0), losing its per-platform choices, and crashed the tuner before 1.20.0 ('Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set')\",\"severity\":\"error\",\"source\":\"aws/aws-ofi-nccl RELEASENOTES.md (v1.16.0 tuner on by default on AWS; v1.17.0 tuner falls back when an algorithm or protocol is set; v1.20.0 segfault fix); NVIDIA/nccl issue 754 (tuner switches by size and topology); NVIDIA/nccl-tests issue 196 (Tree since NCCL 2.4)\"},{\"name\":\"RDMAV_FORK_SAFE\",\"reason\":\"the EFA guidance says 'do not use': rdma-core's fork protection is not needed with current kernels and libfabric, and it costs registration performance\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"FI_EFA_FORK_SAFE\",\"reason\":\"not needed with current libfabric and kernels (fork support is detected)\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_PROTO\",\"reason\":\"aws-ofi-nccl >= 1.6 forces Simple itself where needed; forcing a protocol disables LL/LL128 where they are safe and fast\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"},{\"name\":\"NCCL_BUFFSIZE\",\"reason\":\"leave NCCL_BUFFSIZE at its default; a changed buffer size was tuned for another stack\",\"severity\":\"warning\",\"source\":\"aws/aws-ofi-nccl doc/efa-env-var.md\"}],\"instance_types\":[\"p6e-gb200.36xlarge\"],\"labels\":{\"org.efa-image-build.aws-ofi-nccl.version\":\"1.22.0\",\"org.efa-image-build.cuda.version\":\"12.8\",\"org.efa-image-build.efa-installer.version\":\"1.51.0\",\"org.efa-image-build.gdrcopy.version\":\"2.6\",\"org.efa-image-build.libfabric.version\":\"2.7.0\",\"org.efa-image-build.nccl-tests.version\":\"2.19.6\",\"org.efa-image-build.nccl.version\":\"2.27.7\",\"org.efa-image-build.openmpi.version\":\"4.1.8\",\"org.efa-image-build.openssh.version\":\"8.9p1\",\"org.efa-image-build.variant\":\"cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64\",\"org.opencontainers.image.description\":\"Grace Blackwell p6e-gb200 (arm64) with EFA 1.51 and its aws-ofi-nccl 1.22.0, NCCL 2.27.7 from source\",\"org.opencontainers.image.title\":\"cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64\",\"org.opencontainers.image.vendor\":\"Example ML platform team\"},\"matrix\":\"matrix.yaml\",\"name\":\"cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64\",\"options\":{\"build_ca\":false,\"cuda_arch\":\"100\",\"jobs\":0,\"nccl_net\":\"ofi\"},\"packages\":[\"python3\",\"libhwloc15\"],\"platform\":\"linux/arm64\",\"python\":\"/usr/bin/python3\",\"schema\":\"efa-image-build/lock/v1\",\"tags\":[\"ml-platform/training:cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64-{content_hash}\"],\"training\":{\"code_dir\":\"/opt/ml/code\",\"entry_point\":\"train.py\",\"install_requirements\":false,\"require_hashes\":false,\"requirements\":\"requirements.txt\",\"sagemaker\":true,\"source_dir\":\"examples/training\"}}"
