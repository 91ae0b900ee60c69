# ---- stage

# ---- EFA installer 1.41.0: verify (builder-only stage) -------------------------------------
FROM system AS efa-verify
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN --mount=type=cache,id=efa-image-build-apt-cache-debian12-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-debian12-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
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
RUN --mount=type=cache,id=efa-image-build-apt-cache-debian12-linux-amd64,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=efa-image-build-apt-lists-debian12-linux-amd64,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4 \
 && rm -rf /tmp/aws-efa-installer \
 && { grep -qs ' /var/lib/apt/lists ' /proc/mounts || rm -rf /var/cache/apt/* /var/lib/apt/lists/*; }
WORKDIR /

