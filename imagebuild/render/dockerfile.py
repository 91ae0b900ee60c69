"""The Dockerfile of a Variant: jinja2 (StrictUndefined, so a missing value is an error, never an empty
string) over Dockerfile.templates/, each component block rendering its partial and `Dockerfile.j2` placing the
parts. Pure: the text depends only on the Variant.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import jinja2

from imagebuild import components as blocks
from imagebuild.catalog import osfamily
from imagebuild.components import cuda_runtime
from imagebuild.render import shipped
from imagebuild.variant import LOCK_LABEL, Component, Variant
from imagebuild.versions import Version

BUILD_SYSTEM = "build-system"  # the system stage's twin on a split base's -devel image


def _dq(value: object) -> str:
    """Double-quoted Dockerfile word for ENV/LABEL (JSON string escaping; `$` is escaped for the parser)."""
    return json.dumps(str(value)).replace("$", "\\$")


def _env_value(value: object) -> str:
    """ENV values may reference ${VAR} of the base (PATH, LD_LIBRARY_PATH); keep those, quote the rest."""
    return json.dumps(str(value))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(shipped.templates())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = blocks.q  # the blocks' shell quoting (shlex.quote)
    env.filters["dq"] = _dq
    env.filters["envq"] = _env_value
    env.tests["version_ge"] = lambda a, b: Version(str(a)) >= Version(str(b))
    return env


_ENV: Optional[jinja2.Environment] = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


@dataclass(frozen=True)
class Plan:
    """What the skeleton needs beyond the Variant: derived paths and package sets (all from the blocks)."""

    system_packages: List[str]
    unpinned: List[str]
    builder_packages: List[str]
    builder_dev_packages: List[str]
    built: List[Component]  # components produced in the builder stage (wheel or source), in layer order
    cuda_home: str
    mpi_home: str
    libfabric_home: str
    nccl_home: str
    ldconfig_dirs: List[str]
    needs_sums: bool
    cudart_wheel: bool  # the CUDA runtime is the wheel (shared cudart only, no static library)
    runtime_from: str  # the stage the runtime starts from (a block's own stage, else system)
    runtime_copies: List[str]  # paths the runtime stage copies from the builder
    # The builder's start: runtime_from, or its twin on the -devel base when the base is split
    # (build-system, efa-build): the same OS packages and installer, plus the CUDA toolkit.
    builder_from: str = "system"
    # (stage, name) of each installer stage: on `system`, and its twin on `build-system` when split
    installer_stages: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    toolkit: str = cuda_runtime.TOOLKIT
    # apt pins by upstream version (`name=[epoch:]upstream-*`), resolved in the system stage:
    # {pin: {component, name, pin, prefix, var}}; `resolved_record`: the file that records what they became
    resolved: Dict[str, Dict[str, str]] = field(default_factory=dict)
    resolved_record: str = blocks.RESOLVED_PACKAGES
    # dnf/rpm family: the exact pins of `packages` ({component, name, pin, evr}) and dnf's spelling of each
    # (`name=evr` -> `name-evr`); empty on apt/dpkg
    rpm_pins: List[Dict[str, str]] = field(default_factory=list)
    rpm_specs: Dict[str, str] = field(default_factory=dict)


def plan(v: Variant) -> Plan:
    system = list(v.packages)
    unpinned = [p for p in v.packages if "=" not in p]
    dev: List[str] = []
    resolved: Dict[str, Dict[str, str]] = {}
    for c in v.components:
        if c.method in ("apt", "packages"):
            system += [p for p in c.packages if p not in system]
            dev += [p for p in c.dev_packages if p not in dev]
            for pin in c.packages:
                prefix = blocks.apt_by_upstream(pin)
                if prefix is not None and pin not in resolved:
                    name = pin.partition("=")[0]
                    var = "pin_" + "".join(ch if ch.isalnum() else "_" for ch in name)
                    resolved[pin] = {
                        "component": c.name,
                        "name": name,
                        "pin": pin,
                        "prefix": prefix,
                        "var": var,
                    }
    built = [c for c in v.components if blocks.block(c.name).built(c)]
    if not any(c.method == "source" for c in built):
        dev = []  # -dev packages are only for compiling against the component
    tools: List[str] = []
    for c in built:
        tools += [p for p in blocks.block(c.name).build_tools(c) if p not in tools]
    if v.option("build_ca") and built:
        tools += [p for p in ["ca-certificates"] if p not in tools]
    homes = blocks.homes(v.components, v.platform)
    stages = [s for s in (blocks.block(c.name).stage(c) for c in v.components) if s]
    runtime_from = stages[-1][2] if stages else "system"
    split = v.base.split
    rpm_pins = (
        [
            {"component": "packages", "name": name, "pin": pin, "evr": evr}
            for pin in v.packages
            if "=" in pin
            for name, evr in [osfamily.rpm_pin(pin)]
        ]
        if v.base.family is osfamily.RPM
        else []
    )
    return Plan(
        system_packages=system,
        unpinned=unpinned,
        builder_packages=tools,
        builder_dev_packages=dev,
        built=built,
        cuda_home=homes["CUDA_HOME"],
        mpi_home=homes["MPI_HOME"],
        libfabric_home=homes["LIBFABRIC_HOME"],
        nccl_home=homes["NCCL_HOME"],
        ldconfig_dirs=blocks.layout_dirs(v.components, v.platform, v.base.family)[0],
        needs_sums=any(a.sha256 is None for c in v.components for a in c.artifacts),
        cudart_wheel=homes.get("CUDART") == "shared",
        runtime_from=runtime_from,
        runtime_copies=[path for c in built for path in blocks.block(c.name).runtime(c)],
        builder_from=(f"{runtime_from}-build" if stages else BUILD_SYSTEM) if split else runtime_from,
        installer_stages=[("system", s[2]) for s in stages]
        + ([(BUILD_SYSTEM, f"{s[2]}-build") for s in stages] if split else []),
        resolved=resolved,
        rpm_pins=rpm_pins,
        rpm_specs={r["pin"]: f"{r['name']}-{r['evr']}" for r in rpm_pins},
    )


def _macro(template: str, macro: str, *args: object) -> str:
    return str(getattr(environment().get_template(template).module, macro)(*args))


def render_block(c: Component, v: Variant, p: Plan) -> Dict[str, str]:
    """One block's text: `system` (a step in the system stage), `stage` (a stage of its own, before the
    builder) and/or `build` (builder steps)."""
    block = blocks.block(c.name)
    out: Dict[str, str] = {}
    step = block.system_step(c, v)
    if step:
        out["system"] = _macro(step[0], step[1], c, v, p, *step[2])
    stage = block.stage(c)
    if stage:
        out["stage"] = _macro(stage[0], stage[1], c, v, p, *block.macro_args(c, v))
    partial = block.partial(c) if block.built(c) else None
    if partial:
        out["build"] = _macro(partial[0], partial[1], c, v, p, *block.macro_args(c, v))
    return out


def block_parts(v: Variant, p: Plan) -> Dict[str, List[str]]:
    """Every block's text, in layer order, for the skeleton (Dockerfile.j2) to place."""
    texts = [render_block(c, v, p) for c in v.components]
    return {
        "system": [t["system"] for t in texts if "system" in t],
        "stages": [t["stage"] for t in texts if "stage" in t],
        "builds": [t["build"] for t in texts if "build" in t],
    }


_JSON_ESCAPE = re.compile(r"\\(.)")


def label_json(doc: object) -> str:
    r"""Compact JSON for a LABEL, each quote inside a string written as \u0022: the same document, but
    `_dq` then never writes an escaped backslash before an escaped quote, which docker reads and hadolint's
    parser refuses (a regex like "x": 1 in a custom check would have it)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return _JSON_ESCAPE.sub(lambda m: "\\u0022" if m.group(1) == '"' else m.group(0), text)


def dockerfile(v: Variant) -> str:
    """The Dockerfile text of a Variant (deterministic)."""
    p = plan(v)
    lock = label_json(v.to_lock())
    return (
        environment()
        .get_template("Dockerfile.j2")
        .render(v=v, p=p, parts=block_parts(v, p), lock_label=LOCK_LABEL, lock_json=lock)
    )


# ---------------------------------------------------------------- the build CA in builder stages

_FROM = re.compile(r"FROM[ \t]+(?:--\S+[ \t]+)*(\S+)(?:[ \t]+AS[ \t]+(\S+))?[ \t]*$", re.IGNORECASE)
CA_COPY = "COPY certs/build-ca.crt "


def _stages(text: str) -> List[Tuple[int, str, str]]:
    """(line index, FROM ref, stage name) of each stage, in order; a stage without `AS` is named by index."""
    out: List[Tuple[int, str, str]] = []
    continued = False
    for i, line in enumerate(text.splitlines()):
        body = line.strip()
        if not continued:
            m = _FROM.match(body)
            if m:
                out.append((i, m.group(1), m.group(2) or str(len(out))))
        if body and not body.startswith("#"):
            continued = body.endswith("\\")
    return out


def ca_stages(text: str) -> List[str]:
    """The builder stages of a Dockerfile: every stage the final one does not build on (its FROM chain).
    What the final stage takes from them is only what it COPYs --from them, so the CA stays out."""
    stages = _stages(text)
    if not stages:
        return []
    names = {name.lower(): ref for _i, ref, name in stages}
    chain, ref = {stages[-1][2].lower()}, stages[-1][1].lower()
    while ref in names and ref not in chain:
        chain.add(ref)
        ref = names[ref].lower()
    return [name for _i, _ref, name in stages if name.lower() not in chain]


def with_build_ca(text: str) -> str:
    """The Dockerfile with the build CA (partials/system.j2 `build_ca`) in each builder stage that lacks it,
    after its FROM (and SHELL): what `build --build-ca` sends when the matrix did not ask for the CA.

    The rendered file, which is hashed, stays as it is: the CA never reaches the final image, so the image
    is the same with or without it (the content hash leaves `certs/` out for the same reason).
    """
    lines = text.splitlines(keepends=True)
    stages = _stages(text)
    wanted = set(ca_stages(text))
    ca = _macro("partials/system.j2", "build_ca").strip("\n") + "\n"
    for k in range(len(stages) - 1, -1, -1):  # from the end: earlier line numbers stay valid
        start, _ref, name = stages[k]
        end = stages[k + 1][0] if k + 1 < len(stages) else len(lines)
        if name not in wanted or any(line.startswith(CA_COPY) for line in lines[start:end]):
            continue
        at = start + 1
        if at < end and lines[at].upper().startswith("SHELL"):
            at += 1
        lines.insert(at, ca)
    return "".join(lines)
