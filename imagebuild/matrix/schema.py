"""The strict schema of matrix.yaml: pydantic v2 models, unknown keys refused, no type coercion.

Nothing from the matrix reaches a Dockerfile without passing these models: every string that ends up in a
shell line, an ENV, a LABEL or a FROM has a restricted alphabet here (no whitespace, quotes, `$`, `;`,
backslash or newline where a name or version is expected), and templates shell-quote it again anyway.

Every field is optional in the models because a matrix is built from patches (defaults, templates, axis
values, includes) merged together; `imagebuild.matrix.expand` checks that the merged variant is complete.
`build.py schema` prints the JSON Schema of `MatrixFile` for editors.
"""

from __future__ import annotations

import re
from typing import Annotated, Dict, List, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from imagebuild import components as blocks
from imagebuild.catalog import osfamily
from imagebuild.components import efa_installer
from imagebuild.versions import is_version

COMPONENT_NAMES = blocks.NAMES
ComponentName = Literal[COMPONENT_NAMES]  # type: ignore[valid-type]  # the registry is the only list

_UNSAFE = "whitespace, quotes, `$`, `;`, backslashes and newlines are not allowed"


def _pattern(regex: str, what: str, max_len: int = 200):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if len(value) > max_len:
            raise ValueError(f"{what} is longer than {max_len} characters")
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what} ({_UNSAFE}; expected {regex})")
        return value

    return AfterValidator(check)


def _version(value: str) -> str:
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+~_-]*", value) or not is_version(value) or len(value) > 64:
        raise ValueError(f"{value!r} is not a version number like 1.2.3 ({_UNSAFE})")
    return value


def _https(value: str) -> str:
    if not value.startswith("https://"):
        raise ValueError(f"{value!r} is not an https:// URL (plain http and other schemes are refused)")
    if (
        not re.fullmatch(r"https://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%/+=-]*)?", value)
        or len(value) > 400
    ):
        raise ValueError(f"{value!r} is not a plain https URL ({_UNSAFE}; no query strings)")
    return value


def _image(value: str) -> str:
    if not re.fullmatch(
        r"[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
        r"(@sha256:[0-9a-f]{64})?",
        value,
    ):
        raise ValueError(
            f"{value!r} is not an image reference like repo/name:tag, repo@sha256:<64 hex> or "
            f"repo:tag@sha256:<64 hex> ({_UNSAFE})"
        )
    first = value.split("/")[0]
    if "/" in value and ("." in first or ":" in first or first == "localhost"):
        raise ValueError(
            f"{value!r} names a registry host ({first}); registry hosts are deployment configuration: "
            "write the repository only and set base.registry_arg (the host is given at build time)"
        )
    return value


Version = Annotated[str, AfterValidator(_version)]
HttpsUrl = Annotated[str, AfterValidator(_https)]
ImageRef = Annotated[str, AfterValidator(_image)]
Sha256 = Annotated[str, _pattern(r"[0-9a-f]{64}", "sha256 (64 lowercase hex characters)", 64)]
Commit = Annotated[str, _pattern(r"[0-9a-f]{40}", "git commit (40 lowercase hex characters)", 40)]
Fingerprint = Annotated[
    str, _pattern(r"[0-9A-F]{4}( ?[0-9A-F]{4}){9}", "GPG fingerprint (40 hex, groups of 4 may be spaced)", 60)
]
NameTemplate = Annotated[
    str, _pattern(r"[a-z0-9{][a-z0-9._{}-]*", "name template (lowercase, digits, . _ - and {axis})", 120)
]
AxisKey = Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._+-]*", "axis value key", 64)]
Identifier = Annotated[str, _pattern(r"[a-z][a-z0-9_]*", "identifier (lowercase, digits, _)", 64)]
# `name=version` exactly, or `name=[epoch:]upstream-*`: the newest Debian revision of that upstream version
# the archive has, resolved and verified in the build (imagebuild.components.apt_by_upstream).
AptPackage = Annotated[
    str,
    _pattern(
        r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?=(?:[0-9A-Za-z.+~:_-]+|(?:[0-9]+:)?[0-9][0-9A-Za-z.+~_-]*-\*)",
        "apt pin name=version (or name=[epoch:]upstream-*)",
        160,
    ),
]
OsPackage = Annotated[
    str,
    _pattern(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?(=[0-9A-Za-z.+~:_-]+)?", "OS package name[=version]", 160),
]
Requirement = Annotated[
    str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+_-]*", "pip pin name==version", 160)
]
Filename = Annotated[str, _pattern(r"[A-Za-z0-9][A-Za-z0-9._+-]*", "file name", 200)]
AbsPath = Annotated[str, _pattern(r"/([A-Za-z0-9._+-]+/?)*", "absolute path", 300)]
RelPath = Annotated[str, _pattern(r"[A-Za-z0-9._-][A-Za-z0-9._+/-]*", "relative path", 300)]
EnvName = Annotated[str, _pattern(r"[A-Z_][A-Z0-9_]*", "environment variable name", 100)]
EnvValue = Annotated[str, _pattern(r"[A-Za-z0-9_./:,=+@%^-]*", "environment value", 500)]
LabelKey = Annotated[str, _pattern(r"[a-z0-9][a-z0-9._-]*", "label key", 200)]
LabelValue = Annotated[
    str, _pattern(r"[A-Za-z0-9_./:,=+@%()#-][A-Za-z0-9 _./:,=+@%()#-]*", "label value", 500)
]
Tag = Annotated[
    str,
    _pattern(
        r"[a-z0-9{][a-z0-9{}._/-]*:[A-Za-z0-9_{][A-Za-z0-9_.{}-]{0,127}",
        "image tag repo:tag (no registry host; {name} and {axis} allowed)",
        250,
    ),
]
# A channel is a tag name alone (`dev`): it moves on each promotion, in every repository of the variant.
# `{name}` and the axis keys are filled per variant (`dev-{name}`), so variants that share a repository each
# have their own channel there (issue 42).
Channel = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9_{][A-Za-z0-9_.{}-]{0,127}",
        "channel: a tag name like dev or dev-{name} (no repo, no host)",
        128,
    ),
]
InstanceType = Annotated[str, _pattern(r"[a-z][a-z0-9-]*\.[a-z0-9]+", "instance type like p5.48xlarge", 40)]
ParamValue = Annotated[str, _pattern(r"[A-Za-z0-9_./:,=+@%-]*", "parameter value", 300)]
Platform = Literal["linux/amd64", "linux/arm64"]


def _shell_line(value: str) -> str:
    """A user build step: one shell line, run as it is written (RUN <line>) in the final stage."""
    if not value.strip():
        raise ValueError("an empty build step")
    if len(value) > 2000:
        raise ValueError("a build step is longer than 2000 characters")
    if re.search(r"[\x00-\x08\x0a-\x1f\x7f]", value):
        raise ValueError("a build step is one line: no newlines or control characters (use && to chain)")
    if value.rstrip().endswith("\\"):
        raise ValueError(
            "a build step may not end with a backslash (it would swallow the next Dockerfile line)"
        )
    return value


ShellLine = Annotated[str, AfterValidator(_shell_line)]
Text = Annotated[str, _pattern(r"[^\x00-\x1f\"'`$\\;]*", "description (one line, no quotes or $)", 300)]


class Strict(BaseModel):
    """No unknown keys, no coercion (a YAML float 2.27 is not a version string), immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class WheelSpec(Strict):
    """A build-only wheel (e.g. nvcc's headers) unpacked next to a component in the builder stage."""

    pypi: Requirement
    filename: Filename
    sha256: Sha256


class SourceSpec(Strict):
    """Where a component comes from: exactly one of url, git, pypi, apt, installer, base."""

    url: Optional[HttpsUrl] = Field(None, description="https download; needs sha256 (or gpg_fingerprint)")
    sha256: Optional[Sha256] = Field(None, description="sha256 of the downloaded file")
    filename: Optional[Filename] = Field(
        None, description="file name in context/artifacts (default: from url)"
    )
    gpg_fingerprint: Optional[Fingerprint] = Field(
        None, description="signing key fingerprint (EFA installer)"
    )
    signature_url: Optional[HttpsUrl] = Field(None, description="detached signature (default: url + .sig)")
    key_url: Optional[HttpsUrl] = Field(None, description="public key whose fingerprint must match")
    git: Optional[HttpsUrl] = Field(None, description="git repository; needs commit")
    commit: Optional[Commit] = Field(None, description="40-hex commit: the content address of the source")
    pypi: Optional[Requirement] = Field(None, description="wheel `name==version`; needs sha256 and filename")
    build_wheels: Optional[List[WheelSpec]] = Field(
        None,
        description="pypi only: more wheels for the builder stage (headers, compilers), not in the image",
    )
    apt: Optional[List[AptPackage]] = Field(None, description="OS packages `name=version`")
    apt_dev: Optional[List[AptPackage]] = Field(
        None, description="OS packages `name=version` needed only to build against it (builder stage)"
    )
    installer: Optional[Literal[efa_installer.NAME]] = Field(None, description="bundled by the EFA installer")
    base: Optional[bool] = Field(None, description="already in the base image")

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSpec:
        kinds = [
            k for k in ("url", "git", "pypi", "apt", "installer", "base") if getattr(self, k) is not None
        ]
        if len(kinds) != 1:
            raise ValueError(
                "a source needs exactly one of url, git, pypi, apt, installer, base"
                + (f" (got {', '.join(kinds)})" if kinds else "")
            )
        kind = kinds[0]
        if kind == "url" and not (self.sha256 or self.gpg_fingerprint):
            raise ValueError("a url source needs sha256 (or, for a signed file, gpg_fingerprint)")
        if kind == "git" and not self.commit:
            raise ValueError("a git source needs commit (40 hex characters; tags move, commits do not)")
        if kind == "pypi" and not (self.sha256 and self.filename):
            raise ValueError("a pypi source needs sha256 and filename of the exact wheel")
        if kind != "url" and (self.gpg_fingerprint or self.signature_url or self.key_url):
            raise ValueError("gpg_fingerprint, signature_url and key_url only apply to a url source")
        if kind != "pypi" and self.build_wheels:
            raise ValueError("build_wheels only applies to a pypi source")
        if kind != "apt" and self.apt_dev:
            raise ValueError("apt_dev only applies to an apt source")
        if kind in ("apt", "installer", "base") and (self.sha256 or self.filename or self.commit):
            raise ValueError(f"an {kind} source takes no sha256, filename or commit")
        if kind == "base" and self.base is not True:
            raise ValueError("write `base: true`")
        return self

    @property
    def kind(self) -> str:
        for k in ("url", "git", "pypi", "apt", "installer", "base"):
            if getattr(self, k) is not None:
                return k
        return "unknown"


class ComponentSpec(Strict):
    """One component: its version and where it comes from (the catalog can fill the source in)."""

    version: Optional[Version] = Field(None, description="the component's release, e.g. 2.27.7")
    source: Optional[SourceSpec] = None
    method: Optional[Literal["apt", "wheel", "packages", "source", "installer", "base"]] = Field(
        None, description="install method; default from the source kind"
    )
    prefix: Optional[AbsPath] = Field(None, description="install prefix in the image")
    params: Optional[Dict[Identifier, ParamValue]] = Field(
        None, description="the partial's parameters (see docs/matrix.md)"
    )


class BaseSpec(Strict):
    """The base image. Registry hosts are never written here: see registry_arg."""

    image: Optional[ImageRef] = Field(
        None, description="repository:tag, repository@sha256:<digest> or both, without a registry host"
    )
    registry_arg: Optional[EnvName] = Field(
        None, description="build ARG holding the registry host, e.g. BASE_REGISTRY (FROM ${ARG}/image)"
    )
    kind: Optional[Literal["local", "dlc", "cuda"]] = None
    os: Optional[Literal[osfamily.NAMES]] = Field(  # type: ignore[valid-type]
        None, description="the base's OS; its family picks the package manager (apt/dpkg or dnf/rpm)"
    )
    python: Optional[AbsPath] = Field(None, description="python interpreter in the image")
    local: Optional[bool] = Field(
        None,
        description="the image is made on this machine (`efa-image-build base`), never pulled: "
        "no registry_arg",
    )
    runtime_image: Optional[ImageRef] = Field(
        None,
        description="what the shipped stages start from (kind cuda: default the `-runtime` twin of a "
        "`-devel` image; the builder keeps `image`)",
    )


class TrainingSpec(Strict):
    """The user's training code, installed last at SageMaker's /opt/ml/code."""

    source_dir: Optional[RelPath] = Field(None, description="folder, relative to the matrix file")
    entry_point: Optional[Filename] = Field(None, description="script SageMaker runs (SAGEMAKER_PROGRAM)")
    requirements: Optional[Filename] = Field(None, description="requirements file inside source_dir")
    sagemaker: Optional[bool] = Field(None, description="set SageMaker's env (SAGEMAKER_PROGRAM)")


class OptionsSpec(Strict):
    """Render options."""

    build_ca: Optional[bool] = Field(
        None, description="builder stages trust context/certs/build-ca.crt (TLS-intercepting proxies)"
    )
    cuda_arch: Optional[
        Annotated[str, _pattern(r"[0-9]{2,3}(;[0-9]{2,3})*", "CUDA archs like 90;100", 60)]
    ] = Field(None, description="GPU architectures source builds compile for")
    jobs: Optional[Annotated[int, Field(ge=1, le=256)]] = Field(None, description="make -j")
    nccl_net: Optional[Literal["ofi", "socket"]] = Field(
        None,
        description="how NCCL crosses nodes: ofi (aws-ofi-nccl, the default on EFA instance types) or socket "
        "(TCP on purpose: no plugin although the instance types have EFA)",
    )


# ---------------------------------------------------------------- the team's own checks (`checks:`)
# In container-structure-test's spirit (its command, file existence, file content and metadata tests, the
# field names in snake_case; GoogleContainerTools/container-structure-test README.md): each check is one
# mapping keyed by its name, so templates and axes add checks and `name: null` drops an inherited one.
# Nothing here reaches a shell on the build host: a command runs as an argv inside the container under check.

CheckName = Annotated[str, _pattern(r"[a-z0-9][a-z0-9._-]*", "check name (lowercase, digits, . _ -)", 64)]
CHECK_KINDS = ("command", "path", "metadata")
# A command check's time limit in seconds: the default, and the most one may ask (the whole check run of an
# image is bounded at 600 s, imagebuild/check/runner.py `check_image`).
CHECK_TIMEOUT_DEFAULT = 60
CHECK_TIMEOUT_MAX = 600
_COMMAND_KEYS = (
    "args",
    "exit_code",
    "timeout",
    "expected_output",
    "excluded_output",
    "expected_error",
    "excluded_error",
)
_PATH_KEYS = ("should_exist", "permissions", "uid", "gid", "expected_contents", "excluded_contents")


def _regex(value: str) -> str:
    if len(value) > 500:
        raise ValueError("a regular expression is longer than 500 characters")
    try:
        re.compile(value)
    except re.error as err:
        raise ValueError(f"{value!r} is not a valid regular expression ({err})") from None
    return value


def _word(value: str) -> str:
    """One argv word or metadata value: any text but NUL, bounded (it travels in the lock label)."""
    if "\x00" in value or len(value) > 2000:
        raise ValueError("a command word may not hold a NUL character or be longer than 2000 characters")
    return value


Regex = Annotated[str, AfterValidator(_regex)]
Regexes = Annotated[List[Regex], Field(max_length=50)]
Word = Annotated[str, AfterValidator(_word)]
Permissions = Annotated[
    str,
    _pattern(r"[-dlcbps][-r][-w][-xsS][-r][-w][-xsS][-r][-w][-xtT]", "permission string like -rw-r--r--", 10),
]


class CheckMetadataSpec(Strict):
    """What the image's config must say (container-structure-test's metadataTest); exact values."""

    env: Optional[Dict[EnvName, Word]] = Field(None, description="env var -> its exact value in the image")
    labels: Optional[Dict[LabelKey, Word]] = Field(None, description="label -> its exact value")
    entrypoint: Optional[Annotated[List[Word], Field(max_length=100)]] = Field(
        None, description="the exact ENTRYPOINT ([] for none)"
    )
    cmd: Optional[Annotated[List[Word], Field(max_length=100)]] = Field(
        None, description="the exact CMD ([] for none)"
    )
    workdir: Optional[Word] = Field(None, description='the WORKDIR ("" for none)')
    user: Optional[Word] = Field(None, description='the USER ("" for root by default)')


class CheckSpec(Strict):
    """One check of the team's own: exactly one of `command`, `path`, `metadata` says which kind."""

    description: Optional[Text] = Field(None, description="why the check is there (shown in the report)")
    command: Optional[Word] = Field(None, description="command test: the program, run inside the image")
    args: Optional[Annotated[List[Word], Field(max_length=100)]] = Field(None, description="its arguments")
    exit_code: Optional[Annotated[int, Field(ge=0, le=255)]] = Field(None, description="expected (default 0)")
    timeout: Optional[Annotated[int, Field(ge=1, le=CHECK_TIMEOUT_MAX)]] = Field(
        None, description=f"seconds it may run, killed after (default {CHECK_TIMEOUT_DEFAULT})"
    )
    expected_output: Optional[Regexes] = Field(None, description="regexes stdout must match")
    excluded_output: Optional[Regexes] = Field(None, description="regexes stdout must not match")
    expected_error: Optional[Regexes] = Field(None, description="regexes stderr must match")
    excluded_error: Optional[Regexes] = Field(None, description="regexes stderr must not match")
    path: Optional[AbsPath] = Field(None, description="file test: the file or folder")
    should_exist: Optional[bool] = Field(None, description="default true; false: the path must be absent")
    permissions: Optional[Permissions] = Field(None, description="as `ls -l` shows them, e.g. -rw-r--r--")
    uid: Optional[Annotated[int, Field(ge=0, le=2**32 - 1)]] = Field(None, description="owner's user id")
    gid: Optional[Annotated[int, Field(ge=0, le=2**32 - 1)]] = Field(None, description="owner's group id")
    expected_contents: Optional[Regexes] = Field(None, description="regexes the file's text must match")
    excluded_contents: Optional[Regexes] = Field(None, description="regexes the file's text must not match")
    metadata: Optional[CheckMetadataSpec] = Field(None, description="metadata test: the image's config")

    @model_validator(mode="after")
    def _one_kind(self) -> CheckSpec:
        kinds = [k for k in CHECK_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "a check needs exactly one of command, path, metadata"
                + (f" (got {', '.join(kinds)})" if kinds else "")
            )
        for key in _COMMAND_KEYS + _PATH_KEYS:
            owner = "command" if key in _COMMAND_KEYS else "path"
            if getattr(self, key) is not None and kinds[0] != owner:
                raise ValueError(f"{key} only applies to a {owner} check (this one is a {kinds[0]} check)")
        details = (self.permissions, self.uid, self.gid, self.expected_contents, self.excluded_contents)
        if self.should_exist is False and any(d is not None for d in details):
            raise ValueError("should_exist: false takes no permissions, uid, gid or contents")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in CHECK_KINDS if getattr(self, k) is not None)


Checks = Annotated[Dict[CheckName, Optional[CheckSpec]], Field(max_length=200)]


class ChecksFile(Strict):
    """A file of checks beside the matrix (`checks_file:`): the same `checks:` mapping, nothing else."""

    checks: Checks


class VariantBody(Strict):
    """Everything that describes one image; a patch sets some of it."""

    description: Optional[Text] = None
    base: Optional[BaseSpec] = None
    cuda: Optional[Version] = Field(None, description="CUDA version of the image, e.g. 12.8")
    components: Optional[Dict[ComponentName, Optional[ComponentSpec]]] = Field(
        None, description="component name -> spec; null removes an inherited component"
    )
    env: Optional[Dict[EnvName, EnvValue]] = Field(None, description="extra env (the env linter reviews it)")
    labels: Optional[Dict[LabelKey, LabelValue]] = None
    tags: Optional[List[Tag]] = None
    channels: Optional[List[Channel]] = Field(
        None,
        description="moving tags (dev, staging; dev-{name} where variants share a repository): "
        "`efa-image-build release` moves them to each promoted digest; push never writes them",
    )
    instance_types: Optional[List[InstanceType]] = None
    training: Optional[TrainingSpec] = None
    options: Optional[OptionsSpec] = None
    packages: Optional[List[OsPackage]] = Field(
        None, description="OS packages of the runtime image, `name=version` (pinned) or `name`"
    )
    lint_ignore: Optional[List[EnvName]] = Field(
        None, description="env names whose linter findings you accept (the reason belongs in a comment)"
    )
    platform: Optional[Platform] = Field(None, description="target platform (default linux/amd64)")
    build_steps: Optional[List[ShellLine]] = Field(
        None,
        description="your own shell lines, each a RUN in the final stage after the requirements and before "
        "the training code (flash-attn, TransformerEngine, ...)",
    )
    checks: Optional[Checks] = Field(
        None,
        description="your own checks (command, file, metadata), run by `efa-image-build test` as "
        "custom:<name>; "
        "null drops an inherited one",
    )
    checks_file: Optional[RelPath] = Field(
        None, description="a YAML file beside the matrix with more `checks:` (the matrix's own win by name)"
    )


class TemplateSpec(VariantBody):
    """A named patch variants can inherit from (like a bake target others extend)."""

    extends: Optional[List[Identifier]] = None


class IncludeSpec(Strict):
    """For combinations whose axis values match `match`, also apply `set`; must match at least one."""

    match: Dict[Identifier, AxisKey]
    set: VariantBody


class GroupSpec(VariantBody):
    """One entry of `variants:`: a variant, or a family of them when `axes` cross."""

    name: NameTemplate = Field(description="variant name; {axis} is replaced by each axis value key")
    extends: Optional[List[Identifier]] = Field(None, description="templates applied in order before this")
    axes: Optional[Dict[Identifier, Dict[AxisKey, VariantBody]]] = Field(
        None, description="axis -> {value key -> patch}; every combination becomes a variant"
    )
    include: Optional[List[IncludeSpec]] = None
    exclude: Optional[List[Dict[Identifier, AxisKey]]] = None


class MatrixFile(Strict):
    """The whole matrix.yaml."""

    format: Optional[Literal["efa-image-build/matrix/v1"]] = None
    defaults: Optional[VariantBody] = Field(None, description="inherited by every variant")
    templates: Optional[Dict[Identifier, TemplateSpec]] = None
    variants: List[GroupSpec]


GROUP_META_KEYS = ("name", "extends", "axes", "include", "exclude")


def json_schema() -> dict:
    """The JSON Schema editors use to complete matrix.yaml."""
    schema = MatrixFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "efa-image-build matrix"
    return schema
