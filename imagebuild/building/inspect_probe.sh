#!/bin/sh
# In-container probe of `build.py inspect-base`: what an existing image holds. POSIX sh, read-only.
# It prints sections (`@@name` then raw text); imagebuild/building/inspect_base.py parses them on the host, so the
# image needs nothing but /bin/sh and coreutils. Where a python exists, inspect_probe.py adds what only
# python can see (ncclGetVersion via ctypes, torch). Paths follow the layouts of the PyTorch DLC
# (aws/deep-learning-containers base/x86_64/gpu/cu128/ubuntu22.04/Dockerfile: PATH, LD_LIBRARY_PATH; on
# Amazon Linux 2023 docker/pytorch/Dockerfile.cuda at f1e622e4: the /opt/venv Python, lib64 plugin),
# its EFA install (scripts/docker/common/install_efa.sh) and NVIDIA's CUDA images (/usr/local/cuda).
HERE=$(dirname "$0")

section() { echo "@@$1"; }
first_tool() {  # first of the names that runs: on PATH, then where the EFA installer puts it
    for t in "$@"; do
        for p in "$t" /opt/amazon/efa/bin/"$t" /opt/amazon/openmpi/bin/"$t"; do
            if command -v "$p" >/dev/null 2>&1; then command -v "$p"; return 0; fi
        done
    done
    return 1
}

section arch; uname -m
section os-release; cat /etc/os-release 2>/dev/null
section efa_installed_packages; cat /opt/amazon/efa_installed_packages 2>/dev/null
section fi_info
if t=$(first_tool fi_info); then echo "# $t"; "$t" --version 2>&1; fi
section mpi
if t=$(first_tool ompi_info); then echo "# $t"; "$t" --version 2>&1
elif t=$(first_tool mpirun); then echo "# $t"; "$t" --version 2>&1; fi
section cuda_version_json; cat /usr/local/cuda/version.json 2>/dev/null
section files
for d in /opt /usr/local /usr/lib /usr/lib64 /lib /lib64; do
    [ -d "$d" ] && [ ! -L "$d" ] && find "$d" \( -type f -o -type l \) \( -name 'libnccl.so*' \
        -o -name 'libnccl-net*.so*' -o -name 'libfabric.so*' -o -name 'libcudart.so*' -o -name 'libmpi.so*' \
        -o -name 'fi_info' -o -name 'ompi_info' -o -name 'mpirun' \) 2>/dev/null
done
section python
for p in /opt/venv/bin/python /usr/local/bin/python3 /opt/conda/bin/python /usr/bin/python3; do
    if [ -x "$p" ]; then
        echo "$p"
        section python-probe
        "$p" "$HERE/inspect_probe.py" 2>&1
        break
    fi
done
section end
