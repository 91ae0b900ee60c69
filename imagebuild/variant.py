"""The Variant: one fully resolved, immutable image description, and its JSON lock.

Everything downstream (Dockerfile, static checks, recipes, release records) reads a Variant or its lock,
never the matrix. `to_lock()` is the contract documented in docs/architecture.md;
`imagebuild.components.lock` reads it back (for `build.py test IMAGE`, which has only the image label), in
the block registry's order.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from imagebuild.catalog import osfamily, platforms

LOCK_SCHEMA = "efa-image-build/lock/v1"

# ---------------------------------------------------------------- the labels the tool sets
# Every label the tool writes on an image or a container is named here, and only here: the matrix may not set
# one (imagebuild.matrix.guards asks `is_tool_label`), since a forged one would be trusted (a base digest that
# a skipped rebuild reports, a lock that `test` and `release` read, a container label the cleanup acts on).
_TOOL_LABELS: List[str] = []
TOOL_PREFIX = "org.efa-image-build."
LEGACY_PREFIX = "io.github.efa-image-build."  # older docs' wording of the lock label; all of it is ours


def _tool_label(key: str) -> str:
    """Name one label the tool sets (and so the matrix may not)."""
    _TOOL_LABELS.append(key)
    return key


TITLE_LABEL = _tool_label("org.opencontainers.image.title")
LOCK_LABEL = _tool_label("org.efa-image-build.lock")
LOCK_LABELS = (LOCK_LABEL, _tool_label("io.github.efa-image-build.lock"))  # read both
VARIANT_LABEL = _tool_label("org.efa-image-build.variant")
HASH_LABEL = _tool_label("org.efa-image-build.context-hash")
BASE_DIGEST_LABEL = _tool_label("org.efa-image-build.base.digest")  # the base's manifest digest, when known
BASE_ID_LABEL = _tool_label("org.efa-image-build.base.image-id")  # the base's image id (config digest)
LAYOUT_LABEL = _tool_label("org.efa-image-build.layout")  # the DLC-layout test base
CHECK_CONTAINER_LABEL = _tool_label("org.efa-image-build.check")  # containers of `build.py test`
INSPECT_CONTAINER_LABEL = _tool_label("org.efa-image-build.inspect")  # containers of `inspect-base`
_VERSION_LABEL = "org.efa-image-build.{}.version".split("{}")  # one per component, and the CUDA version


def version_label(component: str) -> str:
    """The label that carries a component's version (`nccl`, `aws_ofi_nccl` -> `aws-ofi-nccl`, `cuda`)."""
    return component.replace("_", "-").join(_VERSION_LABEL)


def is_tool_label(key: str) -> bool:
    """True for a label the tool sets (above, a component's version label) or one under the legacy prefix."""
    head, tail = _VERSION_LABEL
    middle = key[len(head) : len(key) - len(tail)]
    is_version = key.startswith(head) and key.endswith(tail) and middle != "" and "." not in middle
    return key in _TOOL_LABELS or is_version or key.startswith(LEGACY_PREFIX)


def lock_from_labels(labels: Optional[Mapping[str, str]]) -> Optional[Dict[str, Any]]:
    """The lock an image's labels carry, or None (no label, not JSON, not an object)."""
    for key in LOCK_LABELS:
        text = (labels or {}).get(key)
        if text:
            try:
                doc = json.loads(text)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


@dataclass(frozen=True)
class Artifact:
    """One file the Dockerfile COPYs from context/artifacts/ (the build host fetches and verifies it);
    written into the lock by `to_json`, read back by `imagebuild.building.artifacts.artifacts_from_lock`."""

    kind: str  # url | git | pypi
    filename: str
    sha256: Optional[str] = None  # None for git tarballs (pinned by commit) and GPG-only downloads
    url: Optional[str] = None  # https download or git repository
    commit: Optional[str] = None
    requirement: Optional[str] = None  # pypi name==version
    gpg_fingerprint: Optional[str] = None
    signature_url: Optional[str] = None
    key_url: Optional[str] = None
    signature_file: Optional[str] = None  # kept beside the file (and placed in the context) when given
    key_file: Optional[str] = None
    component: str = ""  # the component whose lock entry lists it (set when read back from a lock)
    pip_args: Tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Where in the artifact cache it lives: content addressed by its pin, so two names cannot collide."""
        if self.kind == "git":
            return f"git/{self.commit}"
        if self.sha256:
            return f"{self.kind}/{self.sha256}"
        # signed but not hash-pinned (an EFA installer trusted by its GPG key): addressed by its URL
        return "signed/" + hashlib.sha256(str(self.url).encode()).hexdigest()

    def describe(self) -> str:
        what = self.requirement or self.url or self.filename
        pin = f"commit {self.commit}" if self.kind == "git" else f"sha256 {self.sha256}"
        return f"{self.component}: {self.filename} ({self.kind} {what}, {pin})"

    @property
    def source(self) -> str:
        if self.kind == "git":
            return f"git+{self.url}@{self.commit}"
        if self.kind == "pypi":
            return f"pypi:{self.requirement}"
        return str(self.url)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "kind": self.kind,
            "filename": self.filename,
            "sha256": self.sha256,
            "source": self.source,
        }
        for key in ("url", "commit", "requirement", "gpg_fingerprint", "signature_url", "key_url"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        for key in ("signature_file", "key_file"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class Component:
    """One installed component: what version, how installed, where it lands, what files it needs."""

    name: str
    version: str
    method: str  # apt | wheel | packages | source | installer | base
    source: str  # url | git | pypi | apt | installer | base
    prefix: Optional[str] = None
    packages: Tuple[str, ...] = ()  # apt pins (runtime)
    dev_packages: Tuple[str, ...] = ()  # apt pins needed only to build against it
    params: Tuple[Tuple[str, str], ...] = ()
    artifacts: Tuple[Artifact, ...] = ()
    bundled_by: Optional[str] = None

    @property
    def url(self) -> Optional[str]:
        return self.artifacts[0].url if self.artifacts else None

    @property
    def sha256(self) -> Optional[str]:
        return self.artifacts[0].sha256 if self.artifacts else None

    def param(self, name: str, default: str = "") -> str:
        return dict(self.params).get(name, default)

    def to_json(self) -> Dict[str, Any]:
        return {
            "version": self.version,
            "method": self.method,
            "source": self.source,
            "prefix": self.prefix,
            "url": self.url,
            "sha256": self.sha256,
            "commit": self.artifacts[0].commit if self.artifacts else None,
            "packages": list(self.packages),
            "dev_packages": list(self.dev_packages),
            "params": dict(self.params),
            "artifacts": [a.to_json() for a in self.artifacts],
            "bundled_by": self.bundled_by,
        }


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    reason: str
    source: str
    origin: str = "policy"  # policy | layout | training | user
    overridable: bool = False  # a policy default a site may replace (the lock says so; node-check accepts it)


@dataclass(frozen=True)
class ForbiddenEnv:
    name: str
    reason: str
    source: str
    severity: str = "warning"


@dataclass(frozen=True)
class BaseImage:
    image: str
    kind: str  # local | dlc | cuda
    os: str
    registry_arg: Optional[str] = None
    # The image the shipped stages start from when it is not `image` (a CUDA `-devel` base builds, its
    # `-runtime` twin ships); None: one image for both.
    runtime_image: Optional[str] = None

    def _ref(self, image: str) -> str:
        return f"${{{self.registry_arg}}}/{image}" if self.registry_arg else image

    @property
    def from_ref(self) -> str:
        """What the FROM line of the shipped stages says: `${BASE_REGISTRY}/repo:tag` for private registries
        (a pinned `@sha256:` digest stays on it: the engine then pulls exactly that manifest)."""
        return self._ref(self.runtime_image or self.image)

    @property
    def build_ref(self) -> str:
        """The FROM of the builder stages: the base as written (the `-devel` image, with its toolkit)."""
        return self._ref(self.image)

    @property
    def family(self) -> osfamily.Family:
        """The OS family (apt/dpkg or dnf/rpm): what the templates branch on, never the OS string."""
        return osfamily.family(self.os)

    @property
    def split(self) -> bool:
        """Builder and runtime start from different images."""
        return bool(self.runtime_image) and self.runtime_image != self.image

    @property
    def digest(self) -> Optional[str]:
        """The `sha256:...` the matrix pinned the base to; None for a tag (the builder records it)."""
        return self.image.split("@", 1)[1] if "@" in self.image else None


@dataclass(frozen=True)
class Training:
    source_dir: str  # relative to the matrix file, as written
    entry_point: str
    requirements: Optional[str] = None
    sagemaker: bool = True
    code_dir: str = "/opt/ml/code"
    install_requirements: bool = False  # the file lists packages (not only comments): pip installs them
    require_hashes: bool = False  # every requirement has --hash=: pip --require-hashes


@dataclass(frozen=True)
class CustomCheck:
    """One of the team's own checks (matrix `checks:`), as the lock records it: its spec as canonical JSON
    (hashable, like the rest of a Variant); `build.py test` reports it as `custom:<name>`."""

    name: str
    spec_json: str

    @property
    def spec(self) -> Dict[str, Any]:
        return json.loads(self.spec_json)

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any]) -> CustomCheck:
        return cls(name, json.dumps(dict(spec), sort_keys=True, separators=(",", ":")))


@dataclass(frozen=True)
class Variant:
    name: str
    base: BaseImage
    python: str
    cuda: Optional[str] = None
    components: Tuple[Component, ...] = ()
    packages: Tuple[str, ...] = ()
    env: Tuple[EnvVar, ...] = ()
    env_forbidden: Tuple[ForbiddenEnv, ...] = ()
    labels: Tuple[Tuple[str, str], ...] = ()
    tags: Tuple[str, ...] = ()
    channels: Tuple[str, ...] = ()  # moving tag names: only release moves them, to a gated digest
    instance_types: Tuple[str, ...] = ()
    training: Optional[Training] = None
    options: Tuple[Tuple[str, Any], ...] = ()
    description: str = ""
    axes: Tuple[Tuple[str, str], ...] = ()
    matrix: str = ""
    platform: str = platforms.DEFAULT
    build_steps: Tuple[str, ...] = ()  # the user's shell lines, RUN in the final stage before the code
    checks: Tuple[CustomCheck, ...] = ()  # the team's own checks, by name
    lint: Tuple[Tuple[str, str, str], ...] = field(default=(), compare=False)  # (severity, name, message)

    def component(self, name: str) -> Optional[Component]:
        for comp in self.components:
            if comp.name == name:
                return comp
        return None

    def has(self, name: str) -> bool:
        return self.component(name) is not None

    def version_of(self, name: str) -> Optional[str]:
        comp = self.component(name)
        return comp.version if comp else None

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    def to_lock(self) -> Dict[str, Any]:
        """The lock as a JSON-ready dict (dump with sort_keys=True: see `lock_json`). `checks` only when the
        variant has some: the lock (and content hash) of a variant without them stays what it was."""
        checks = {"checks": {c.name: c.spec for c in self.checks}} if self.checks else {}
        return (
            checks
            | {
                "schema": LOCK_SCHEMA,
                "name": self.name,
                "description": self.description,
                "matrix": self.matrix,
                "axes": dict(self.axes),
                "base": {
                    "image": self.base.image,
                    "kind": self.base.kind,
                    "os": self.base.os,
                    "registry_arg": self.base.registry_arg,
                    "digest": self.base.digest,
                    "runtime_image": self.base.runtime_image,
                },
                "platform": self.platform,
                "build_steps": list(self.build_steps),
                "cuda": self.cuda,
                "python": self.python,
                "packages": list(self.packages),
                "components": {c.name: c.to_json() for c in self.components},
                "env": [
                    {
                        "name": e.name,
                        "value": e.value,
                        "reason": e.reason,
                        "source": e.source,
                        "origin": e.origin,
                    }
                    | ({"overridable": True} if e.overridable else {})
                    for e in self.env
                ],
                "env_forbidden": [
                    {"name": f.name, "reason": f.reason, "source": f.source, "severity": f.severity}
                    for f in self.env_forbidden
                ],
                "labels": dict(self.labels),
                "tags": list(self.tags),
                "instance_types": list(self.instance_types),
                "training": None
                if self.training is None
                else {
                    "source_dir": self.training.source_dir,
                    "entry_point": self.training.entry_point,
                    "requirements": self.training.requirements,
                    "sagemaker": self.training.sagemaker,
                    "code_dir": self.training.code_dir,
                    "install_requirements": self.training.install_requirements,
                    "require_hashes": self.training.require_hashes,
                },
                "options": dict(self.options),
            }
            | self._channels_lock()
        )

    def _channels_lock(self) -> Dict[str, Any]:
        """`channels` only where the matrix declares some: a lock (hence the image's label and its content
        hash) without channels stays what it was before channels existed, so no image is rebuilt for them."""
        return {"channels": list(self.channels)} if self.channels else {}

    def lock_json(self, indent: Optional[int] = 2) -> str:
        seps = (",", ": ") if indent else (",", ":")
        return json.dumps(self.to_lock(), sort_keys=True, indent=indent, separators=seps) + (
            "\n" if indent else ""
        )
