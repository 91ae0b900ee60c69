"""One building block per component, and the ordered registry every component list derives from.

A block (in the spirit of NVIDIA hpc-container-maker's building blocks, hpccm/building_blocks/*.py) owns
everything about its component that used to be spread over the resolver, the renderer and the static
checks: the install methods it has a partial for, its parameters with their defaults, its prefix when the
EFA installer bundles it, its library and binary directories, the homes it gives other builds (CUDA_HOME,
MPI_HOME, ...), its builder-stage packages, its partial (Dockerfile.templates/partials/<name>.j2), what the
runtime stage copies from the builder, and its static checks. Blocks are pure: they read a Component (or
the lock) and the catalog.

Adding a component is one module here (a `Block` subclass named `BLOCK`, with its `layer`), one partial, one
catalog entry and one golden file: the registry finds the module itself, ordered by `layer` (least to most
often changed, the order of the image's layers).
"""

from __future__ import annotations

import importlib
import pkgutil
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from imagebuild import catalog
from imagebuild.catalog import osfamily, platforms
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component, Variant

Homes = Dict[str, str]


def absent(name: str) -> str:
    """The skip reason of a check whose component is not in the variant."""
    return f"variant has no {name} component"


def lock_component(lock: Mapping[str, Any], name: str) -> Optional[Dict[str, Any]]:
    comp = (lock.get("components") or {}).get(name)
    return comp if isinstance(comp, dict) else None


# The record the system stage writes of the apt pins it resolved by upstream version
# (`name=[epoch:]upstream-*`).
RESOLVED_PACKAGES = "/opt/efa-image-build/resolved-packages.json"


def apt_by_upstream(pin: str) -> Optional[str]:
    """`openssh-server=1:8.9p1-*` -> `1:8.9p1-`: any Debian revision of that upstream version (the newest the
    base's archive has, resolved in the build); None for an exact pin (`openssh-server=1:8.9p1-3ubuntu0.16`).
    """
    _, _, version = pin.partition("=")
    return version[:-1] if version.endswith("-*") else None


def apt_pin_matches(pin: str, installed: str) -> bool:
    """Whether the installed package version is what `pin` asks: equal for an exact pin; for a pin by upstream
    version, that epoch and upstream with any Debian revision (a revision holds no `-`)."""
    prefix = apt_by_upstream(pin)
    if prefix is None:
        return installed == pin.partition("=")[2]
    rest = installed[len(prefix) :] if installed.startswith(prefix) else ""
    return bool(rest) and "-" not in rest


@dataclass(frozen=True)
class Needs:
    """Another component this one cannot work without: a compat rule, checked before anything renders."""

    component: str
    rule: str
    message: str
    source: str


class Block:
    """Base of every block: the defaults a component without its own rule gets.

    Class attributes a block sets:
      name      the component's key in the matrix, the lock and the catalog
      layer     its place in the image (registry order), least often changed first
      methods   install methods it supports (a partial exists for wheel/source/installer; apt, packages and
                base render nothing of their own: apt pins join the system stage, base is already there)
      params    parameter -> allowed values, the first is the default (`components.<name>.params`)
      tools     builder-stage OS packages its source build needs
      bundled   the EFA installer can bundle it (`source: {installer: efa_installer}`)
      system    it lands in /usr whatever the source, unless the EFA installer bundles it
      default_method  the method when the matrix names only a version and no source
      needs     components it cannot work without (compat rules with their sources)
      tag       (rank, abbreviation) of its version in an image's version tag (`nccl2.27.7-ofi1.21.1`);
                None: not in the tag
      framework a framework that loads an NCCL of its own (torch): the nccl block checks which one
    """

    name: str = ""
    layer: int = 0
    methods: Tuple[str, ...] = ()
    params: Dict[str, Tuple[str, ...]] = {}
    tools: Tuple[str, ...] = ()
    bundled: bool = False
    system: bool = False  # a system library: /usr from any source but the EFA installer's
    default_method: Optional[str] = None
    needs: Tuple[Needs, ...] = ()
    tag: Optional[Tuple[int, str]] = None
    framework: bool = False  # a framework that loads an NCCL of its own (torch: its wheel's)

    # ---- resolve ------------------------------------------------------------------------------------

    def installer_key(self, efa_params: Mapping[str, Any]) -> str:
        """Key of this component in efa_installers.yaml (its bundled version, `layout.<key>_prefix`)."""
        return self.name

    def extra_wheels(
        self, params: Mapping[str, Any], wheel: Mapping[str, Any]
    ) -> Optional[Tuple[str, List[Dict[str, Any]]]]:
        """(parameter, catalog wheels) when the parameters ask for build-only wheels beside the pinned one."""
        return None

    def default_prefix(
        self, kind: str, efa_params: Mapping[str, Any], base_kind: str = "local", base_os: str = ""
    ) -> Optional[str]:
        """Where it lands when the matrix gives no prefix: by source kind, and for a component already in the
        base by the base's kind (a DLC keeps its EFA stack under /opt/amazon, not in /usr: the catalog's
        `base_prefix`), an OS's own layout of that kind first (`dlc-amzn2023`: Python in /opt/venv)."""
        if kind == "installer":
            layout = catalog.efa_installers()["layout"]
            return layout[f"{self.installer_key(efa_params)}_prefix"]
        if kind == "base":
            known_prefixes = catalog.component(self.name).get("base_prefix") or {}
            known = known_prefixes.get(f"{base_kind}-{base_os}") or known_prefixes.get(base_kind)
            if known:
                return known
        if kind == "apt" or self.system:
            return "/usr"
        if kind == "base":
            return None
        return catalog.component(self.name)["prefix"]

    # ---- layout -------------------------------------------------------------------------------------

    def libdirs(self, comp: Component) -> List[str]:
        """Library directories put first on LD_LIBRARY_PATH (and in ld.so.conf.d)."""
        return [f"{comp.prefix}/lib"]

    def bindirs(self, comp: Component) -> List[str]:
        """Binary directories put first on PATH."""
        return []

    def homes(self, comp: Component) -> Homes:
        """Homes this component gives the other builds (CUDA_HOME, MPI_HOME, ...), when present."""
        return {}

    default_homes: Homes = {}  # homes that hold when no present component gives one

    # ---- render -------------------------------------------------------------------------------------

    def partial(self, comp: Component) -> Optional[Tuple[str, str]]:
        """(template, macro) that renders this component in the builder stage; None: nothing to render."""
        if comp.method == "wheel":
            return "partials/wheel.j2", "build"
        if comp.method == "source":
            return f"partials/{self.name}.j2", "build"
        return None

    def stage(self, comp: Component) -> Optional[Tuple[str, str, str]]:
        """(template, macro, stage name) of its own stage before the builder; the runtime builds on it."""
        return None

    def macro_args(self, comp: Component, v: Variant) -> Tuple[Any, ...]:
        """Arguments its partial's macro takes after (comp, v, p)."""
        return ()

    def system_step(self, comp: Component, v: Variant) -> Optional[Tuple[str, str, Tuple[Any, ...]]]:
        """(template, macro, arguments after (comp, v, p)) of a step in the system stage, after the OS
        packages (so the builder and the runtime both see it): configuring an OS package, removing what the
        base ships in the component's place."""
        return None

    def build_tools(self, comp: Component) -> List[str]:
        """Builder-stage packages for this component: git for a git archive, its own tools for a build."""
        if comp.method == "wheel":
            return ["python3"]
        return (["git"] if comp.source == "git" else []) + list(self.tools)

    def built(self, comp: Component) -> bool:
        """Whether the builder stage produces it (and the runtime stage copies it)."""
        return comp.method in ("wheel", "source")

    def runtime(self, comp: Component) -> List[str]:
        """Paths the runtime stage copies from the builder (like hpccm's `runtime()`)."""
        return [comp.prefix] if comp.prefix else []

    # ---- static checks ------------------------------------------------------------------------------

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        """The static checks this component asks of an image, derived from the lock alone (pure).

        A block keeps its checks listed when it is absent (with a `skip` reason), so a report says what was
        not checked. A block without checks of its own gets a `recorded` entry (see expectations.derive)."""
        return []

    def check(
        self,
        lock: Mapping[str, Any],
        name: str,
        probe: str,
        why: str,
        params: Mapping[str, Any],
        present: Optional[bool] = None,
        unless: Optional[str] = None,
    ) -> Expectation:
        """One check of this component, skipped with the standard reason when the component is absent, or
        with `unless` when it is there but `present` says the check does not apply."""
        there = lock_component(lock, self.name) is not None
        here = there if present is None else present
        reason = None if here else (unless if there and unless else absent(self.name))
        return Expectation(name, probe, why, dict(params), self.name, reason)


def q(value: object) -> str:
    """Shell-quote one value: every value a block's partial puts into a RUN line goes through this (`| q`).

    Values were restricted by the schema already; this is the second fence."""
    return shlex.quote(str(value))


def _discover() -> Tuple[Block, ...]:
    blocks: List[Block] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        block = getattr(module, "BLOCK", None)
        if isinstance(block, Block):
            blocks.append(block)
    blocks.sort(key=lambda b: (b.layer, b.name))
    return tuple(blocks)


REGISTRY: Tuple[Block, ...] = _discover()
NAMES: Tuple[str, ...] = tuple(b.name for b in REGISTRY)
_BY_NAME = {b.name: b for b in REGISTRY}


def block(name: str) -> Block:
    return _BY_NAME[name]


def order_key(name: str) -> int:
    """Registry position of a component name (unknown names last)."""
    return NAMES.index(name) if name in _BY_NAME else len(NAMES)


def layout_dirs(
    components: Sequence[Component], platform: str = platforms.DEFAULT, family: osfamily.Family = osfamily.DEB
) -> Tuple[List[str], List[str]]:
    """(library dirs, binary dirs) of the components' own prefixes, in registry order, each once.

    System prefixes (/usr) and base-image components of unknown place need nothing; a base component with a
    prefix (a DLC's /opt/amazon/..., torch's NCCL) is put on the paths so the image's tools load that one.
    `{multiarch}` in a block's directory is the platform's (imagebuild.catalog.platforms); on the rpm
    family the OS's own library directories instead (osfamily.Family.libdirs: lib64, no multiarch)."""
    fill = platforms.platform(platform).fill
    libdirs: List[str] = []
    bindirs: List[str] = []
    for comp in sorted(components, key=lambda c: order_key(c.name)):
        if comp.name not in _BY_NAME or not comp.prefix or comp.prefix == "/usr":
            continue
        b = _BY_NAME[comp.name]
        libdirs += [fill(d) for d in family.libdirs(b.libdirs(comp)) if fill(d) not in libdirs]
        bindirs += [fill(d) for d in b.bindirs(comp) if fill(d) not in bindirs]
    return libdirs, bindirs


def homes(components: Sequence[Component], platform: str = platforms.DEFAULT) -> Homes:
    """Every home the builds use: from present components in registry order, then the blocks' defaults
    (`{multiarch}` filled in for the platform)."""
    fill = platforms.platform(platform).fill
    out: Homes = {}
    present = {c.name: c for c in components}
    for b in REGISTRY:
        if b.name in present:
            for key, value in b.homes(present[b.name]).items():
                out.setdefault(key, fill(value))
    for b in REGISTRY:
        for key, value in b.default_homes.items():
            out.setdefault(key, fill(value))
    return out
