#!/usr/bin/env bash
# Prepare a fresh Debian/Ubuntu build host: the OS packages the tool and its tests use, and a running
# docker engine. Idempotent: a second run installs nothing and starts nothing.
set -euo pipefail

PACKAGES=(
  docker.io debootstrap                      # real image builds; the local base image
  openmpi-bin libopenmpi-dev                 # mpirun for the pre-flight runner tests
  libfabric-bin libfabric-dev rdma-core ibverbs-utils hwloc
  gcc                                        # a real plugin .so linked to libfabric (node-check loader test)
  docker-registry apache2-utils              # a real OCI registry (htpasswd for its auth tests)
  openssh-server openssh-client              # mpirun across containers
  slurm-wlm munge                            # srun through the runner
  iproute2 ca-certificates git gnupg
  jq                                         # the CI examples' checks of build/summary.json
  zsh fish tcsh                              # the completion scripts, run in each shell (test_completion.py)
  qemu-user-static binfmt-support            # arm64 twins built under emulation (`build.py base --platform`)
)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-host: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# User-mode emulation for other architectures: binfmt_misc mounted and qemu's interpreters registered (the
# packages register them with the F flag, so they work in chroots and containers). Best effort: a host
# whose kernel or container forbids it still builds and tests its own architecture.
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
  as_root mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null \
    || echo "setup-host: cannot mount binfmt_misc: no arm64 emulation on this host" >&2
fi
if [ -e "$binfmt/register" ] && [ "$(head -n1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]; then
  as_root update-binfmts --enable >/dev/null 2>&1 \
    || echo "setup-host: update-binfmts --enable failed: no arm64 emulation on this host" >&2
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup-host: starting dockerd (log: /var/log/efa-image-build-dockerd.log)"
  as_root sh -c 'nohup dockerd >/var/log/efa-image-build-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup-host: dockerd did not come up; see the log" >&2; exit 2; }
fi
emulation=no
[ "$(head -n1 "$binfmt/qemu-aarch64" 2>/dev/null)" = enabled ] && emulation=yes
echo "setup-host: ok (docker $(docker version --format '{{.Server.Version}}' 2>/dev/null), arm64 emulation: $emulation)"
