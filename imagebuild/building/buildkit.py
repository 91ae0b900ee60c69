"""Which builder builds: buildx, the engine's own BuildKit through an older docker CLI, or classic.

BuildKit is the default where the machine has it, because it runs independent stages in parallel, honours
`RUN --mount=type=cache` and exports cache (inline, or to a registry with buildx). The choice is a pure
function of what the docker CLIs on PATH can do, probed once:
- a CLI with the buildx plugin (`docker buildx version` works): `docker buildx build --load`;
- else a CLI older than 23.0, which carries BuildKit itself (`DOCKER_BUILDKIT=1 docker build`; from 23.0 the
  CLI hands BuildKit builds to buildx and fails without it);
- else the classic builder through the docker SDK (what `images.build` always uses).
The image gets the same content-hash tags and labels whichever builds it (imagebuild.building.builder tags
it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from imagebuild.errors import UserError

BUILDERS = ("auto", "buildkit", "classic")
# The engine's BuildKit exports cache metadata into the image with this build arg: a later `--cache-from`
# of the pushed image reuses its layers (docs.docker.com "cache backends: inline").
INLINE_CACHE_ARG = "BUILDKIT_INLINE_CACHE"


@dataclass(frozen=True)
class CliProbe:
    """What one docker CLI on this machine can do."""

    path: str
    version: Optional[str]  # client version, e.g. "20.10.24+dfsg1"; None if it did not answer
    buildx: bool


@dataclass(frozen=True)
class BuilderChoice:
    kind: str  # buildx | buildkit | classic
    cli: Optional[str]  # the docker CLI that runs the build (None: the SDK)
    reason: str

    @property
    def is_buildkit(self) -> bool:
        return self.kind in ("buildx", "buildkit")


CLASSIC = BuilderChoice("classic", None, "classic builder (docker SDK)")


def _major(version: Optional[str]) -> Optional[int]:
    m = re.match(r"(\d+)\.", version or "")
    return int(m.group(1)) if m else None


def choose_builder(want: str, probes: Sequence[CliProbe]) -> BuilderChoice:
    """auto: buildx, else a pre-23 CLI's own BuildKit, else classic. buildkit: the same, or a UserError."""
    if want not in BUILDERS:
        raise UserError(f"unknown builder {want!r}", key="--builder", hint=" | ".join(BUILDERS))
    if want == "classic":
        return CLASSIC
    for p in probes:
        if p.buildx:
            return BuilderChoice("buildx", p.path, f"BuildKit through buildx ({p.path})")
    for p in probes:
        major = _major(p.version)
        if major is not None and major < 23:
            return BuilderChoice(
                "buildkit", p.path, f"the engine's BuildKit through docker CLI {p.version} ({p.path})"
            )
    if want == "buildkit":
        seen = ", ".join(f"{p.path} {p.version or '?'}" for p in probes) or "no docker CLI on PATH"
        raise UserError(
            f"--builder buildkit: no docker CLI here can run a BuildKit build ({seen})",
            key="--builder",
            hint="install the buildx plugin (docker-buildx), or use --builder classic",
        )
    return CLASSIC


def docker_clis(path_env: Optional[str] = None) -> List[str]:
    """Every distinct `docker` executable on PATH, in PATH order."""
    found: List[str] = []
    for d in (path_env if path_env is not None else os.environ.get("PATH", "")).split(os.pathsep):
        cand = os.path.join(d, "docker") if d else ""
        if cand and os.access(cand, os.X_OK) and os.path.isfile(cand):
            real = os.path.realpath(cand)
            if real not in {os.path.realpath(f) for f in found}:
                found.append(cand)
    return found


def probe(cli: str, timeout: float = 20.0) -> CliProbe:
    """Ask one CLI its version and whether buildx answers (both local: no engine round trip for buildx)."""

    def ask(argv: List[str]) -> Tuple[int, str]:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return 1, ""
        return proc.returncode, proc.stdout.strip()

    rc, version = ask([cli, "version", "--format", "{{.Client.Version}}"])
    rc_x, _ = ask([cli, "buildx", "version"])
    return CliProbe(cli, version if rc == 0 and version else None, rc_x == 0)


def detect(want: str) -> BuilderChoice:
    """The builder for `want` on this machine (probes only when BuildKit is a possibility)."""
    if want == "classic":
        return CLASSIC
    if want not in BUILDERS:
        return choose_builder(want, [])
    return choose_builder(want, [probe(c) for c in docker_clis()] if shutil.which("docker") else [])


def cache_args(choice: BuilderChoice, cache_from: Sequence[str], cache_to: Sequence[str]) -> List[str]:
    """`--cache-from/--cache-to` flags; a plain image ref means a registry cache (inline where no buildx)."""
    if cache_to and choice.kind != "buildx":
        raise UserError(
            f"--cache-to needs buildx (builder here: {choice.kind})",
            key="--cache-to",
            hint="the engine's BuildKit writes its cache inline into the image: push it and give "
            "--cache-from IMAGE next time",
        )
    out: List[str] = []
    for ref in cache_from:
        spec = ref if "=" in ref or choice.kind != "buildx" else f"type=registry,ref={ref}"
        out += ["--cache-from", spec]
    for ref in cache_to:
        out += ["--cache-to", ref if "=" in ref else f"type=registry,ref={ref},mode=max"]
    return out


def build_argv(
    choice: BuilderChoice,
    dockerfile: str,
    iidfile: str,
    labels: Dict[str, str],
    build_args: Dict[str, str],
    nocache: bool = False,
    cache_from: Sequence[str] = (),
    cache_to: Sequence[str] = (),
    platform: Optional[str] = None,
) -> Tuple[List[str], Dict[str, str]]:
    """(argv, extra env) of a BuildKit build whose context tar comes on stdin; the image is left untagged.
    `platform`: the variant's (linux/amd64, linux/arm64); another than the engine's needs emulation."""
    assert choice.cli, "BuildKit builds run through a docker CLI"
    argv = [choice.cli] + (["buildx", "build", "--load"] if choice.kind == "buildx" else ["build"])
    argv += ["--progress=plain", "-f", dockerfile, "--iidfile", iidfile]
    if nocache:
        argv.append("--no-cache")
    if platform:
        argv += ["--platform", platform]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    args = dict(build_args)
    if not cache_to:
        args.setdefault(INLINE_CACHE_ARG, "1")
    for key, value in args.items():
        argv += ["--build-arg", f"{key}={value}"]
    argv += cache_args(choice, cache_from, cache_to)
    argv.append("-")
    env = {"DOCKER_BUILDKIT": "1"} if choice.kind == "buildkit" else {}
    return argv, env


# `#7 [stage 3/6] RUN ...` or `#7 [3/6] RUN ...`: BuildKit's plain progress line for a Dockerfile step.
STEP_RE = re.compile(r"^#\d+ \[(?:[^\]\s]+ )?(\d+)/(\d+)\] (.*)")
