"""Where images go and how to log in there: an OCI registry or ECR.

`RegistryTarget` is the user's choice as data (flags become it in imagebuild/commands/); `Destination` is
one push target (push, and build's look-up of content tags other runners pushed); `Registries` reads and
writes manifests on every registry a release touches (ECR's API for the ECR host, the v2 API for others), and
gives the v2 API of each host for the SBOM and provenance (on the ECR host too, logged in with its token).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from imagebuild.adapters import registry as reg
from imagebuild.errors import UserError
from imagebuild.retry import RetryPolicy


def log(msg: str) -> None:
    """Progress and refusals go to stderr; stdout carries the results (refs, digests) scripts read."""
    from imagebuild.settings.logs import progress

    progress(msg)  # -q hides it


@dataclass(frozen=True)
class RegistryTarget:
    """An OCI registry (`registry`, else $IMAGE_REGISTRY) or ECR (`ecr`), and the login to use there."""

    registry: Optional[str] = None  # HOST[/NAMESPACE]
    ecr: bool = False
    username: Optional[str] = None
    password: Optional[str] = None
    docker_config: Optional[str] = None
    plain_http: bool = False
    region: Optional[str] = None
    endpoint_url: Optional[str] = None
    attempts: int = 5

    def policy(self) -> RetryPolicy:
        if self.attempts < 1 or self.attempts > 20:
            raise UserError("must be between 1 and 20", key="--attempts")
        return RetryPolicy(attempts=self.attempts)

    def api(self, host: str, policy: RetryPolicy) -> reg.RegistryAPI:
        """The v2 API of `host`, logged in as this target says."""
        creds = reg.resolve_credentials(host, self.username, self.password, docker_config=self.docker_config)
        return reg.RegistryAPI(
            host, creds, plain_http=True if self.plain_http else None, policy=policy, log=log
        )


def ecr_endpoint(target: RegistryTarget, policy: RetryPolicy) -> Tuple[Any, str]:
    """ECR's API client for the target's region and endpoint, and the host of its registry (from the API)."""
    from imagebuild.adapters import ecr
    from imagebuild.adapters.aws import aws_client

    client = aws_client("ecr", target.region, target.endpoint_url)
    return client, ecr.registry_host(client, policy)


def ecr_registry_api(ecr_client: Any, host: str, policy: RetryPolicy) -> reg.RegistryAPI:
    """The v2 API of ECR's registry `host`, logged in with `ecr_client`'s token: the one login there, for
    what ECR's own API cannot write (Destination.oci_api: twins' index, fan-in) and for the SBOM and
    provenance (Registries.api)."""
    from imagebuild.adapters import ecr

    return ecr.registry_api(ecr_client, host, policy, log)


class Destination:
    """An OCI registry or ECR: where refs point, who we are there, and how to ask what a tag holds."""

    def __init__(self, target: RegistryTarget, policy: RetryPolicy) -> None:
        self.policy = policy
        self.ecr_client = None
        self.api: Optional[reg.RegistryAPI] = None
        if target.ecr:
            from imagebuild.adapters import ecr

            self.ecr_client, self.host = ecr_endpoint(target, policy)
            self.creds = ecr.login(self.ecr_client, policy)
            self.namespace = ""
            self.existing = ecr.existing_image(self.ecr_client, policy)
            self._oci_api: Optional[reg.RegistryAPI] = None  # made on first use: only indexes need it
            return
        where = target.registry or os.environ.get("IMAGE_REGISTRY")
        if not where:
            raise UserError(
                "no registry given", key="--registry", hint="--registry HOST[/NS], $IMAGE_REGISTRY or --ecr"
            )
        self.host, _, namespace = where.strip("/").partition("/")
        if not reg.is_host(self.host):
            raise UserError(
                f"{self.host!r} is no registry host", key="--registry", hint="HOST[:PORT][/NAMESPACE]"
            )
        self.namespace = namespace + "/" if namespace else ""
        api = target.api(self.host, policy)
        self.api, self.creds = api, api.creds
        self._oci_api = api
        self.existing = lambda ref: api.manifest(ref.repository, ref.digest or ref.tag)

    def oci_api(self) -> reg.RegistryAPI:
        """The destination's v2 API, for what ECR's own API cannot write: image indexes (twins' shared tag,
        fan-in). On ECR its registry host, logged in with its token (ECR takes OCI image indexes there)."""
        if self._oci_api is None:
            self._oci_api = ecr_registry_api(self.ecr_client, self.host, self.policy)
        return self._oci_api

    def prepare(self, repository: str) -> str:
        """The full repository path in this destination (ECR: created if missing)."""
        if self.ecr_client is not None:
            from imagebuild.adapters import ecr

            repo = ecr.ensure_repository(self.ecr_client, repository, self.policy, log)
            return reg.split_ref(repo["repositoryUri"]).repository
        return self.namespace + repository

    def ref(self, repository: str, tag: str) -> reg.ImageRef:
        return reg.ImageRef(self.host, repository, tag)


class Registries:
    """One manifest reader/writer per registry host: ECR's API for the ECR host, the v2 API for others."""

    def __init__(self, target: RegistryTarget, policy: RetryPolicy) -> None:
        self.target, self.policy = target, policy
        self._apis: Dict[str, reg.RegistryAPI] = {}
        self.ecr_host: Optional[str] = None
        self.ecr_client = None
        if target.ecr:
            self.ecr_client, self.ecr_host = ecr_endpoint(target, policy)

    def manifest(self, host: str, repository: str, reference: str) -> Optional[reg.RemoteManifest]:
        if host == self.ecr_host:
            from imagebuild.adapters import ecr

            is_digest = reference.startswith("sha256:")
            ref = reg.ImageRef(
                host, repository, None if is_digest else reference, reference if is_digest else None
            )
            return ecr.existing_image(self.ecr_client, self.policy)(ref)
        return self._api(host).manifest(repository, reference)

    def put(self, host: str, repository: str, tag: str, manifest: reg.RemoteManifest) -> str:
        if host == self.ecr_host:
            from imagebuild.adapters import ecr

            return ecr.put_tag(self.ecr_client, reg.ImageRef(host, repository, tag), manifest, self.policy)
        return self._api(host).put_manifest(repository, tag, manifest)

    def config_labels(self, host: str, repository: str, config_digest: str) -> Optional[Dict[str, str]]:
        """The labels of the image config stored in the registry (OCI registries; None for ECR)."""
        if host == self.ecr_host:
            return None
        body = self._api(host).blob(repository, config_digest)
        if body is None:
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            raise UserError(
                f"registry {host}: image config {repository}@{config_digest} is not JSON", key="registry"
            ) from None
        config = doc.get("config") if isinstance(doc, dict) else None
        labels = config.get("Labels") if isinstance(config, dict) else None
        return labels if isinstance(labels, dict) else {}

    def api(self, host: str) -> reg.RegistryAPI:
        """The v2 API of `host`, logged in, one per host: the ECR host with ECR's token (its registry stores
        the SBOM and provenance, imagebuild/adapters/ecr.py says where that is documented), others as the
        target says."""
        return self._api(host)

    def fixed_tags(self, host: str) -> bool:
        """Whether a tag there must never move: the ECR host (this tool makes its repositories IMMUTABLE)."""
        return host == self.ecr_host

    def _api(self, host: str) -> reg.RegistryAPI:
        if host not in self._apis:
            if host == self.ecr_host:
                self._apis[host] = ecr_registry_api(self.ecr_client, host, self.policy)
            else:
                self._apis[host] = self.target.api(host, self.policy)
        return self._apis[host]


def content_lookup(target: RegistryTarget, repository_prefix: str) -> Any:
    """build's look-up of content tags in the target registry (images other runners built and pushed)."""
    from imagebuild.building.registryhit import content_lookup as lookup

    dest = Destination(target, target.policy())
    return lookup(
        dest.host,
        lambda repo: dest.namespace + repository_prefix + repo,
        dest.existing,
        config_of=dest.api.blob if dest.api is not None else None,
        log=log,
    )
