# ---- build
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

# ---- system
# One NCCL per image: nccl 2.27.7 comes from this build, so the base's NCCL packages go.
RUN { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' libnccl2 libnccl-dev 2>/dev/null || true; } \
      | awk '$1 ~ /^.i/ {print $2}' | xargs -r apt-get purge -y --allow-change-held-packages \
 && ldconfig
