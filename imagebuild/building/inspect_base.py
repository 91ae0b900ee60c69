"""What an existing base image holds, and the matrix lines that declare it (`build.py inspect-base IMAGE`).

A DLC or CUDA base already carries Python, NCCL, libfabric, Open MPI, maybe aws-ofi-nccl and torch; a variant
that extends it must declare them (`source: {base: true}`) with their real versions and the real interpreter.
The probe (inspect_probe.sh, plus inspect_probe.py where the image has a python) runs in a throwaway container
of the image with no network and prints raw sections; everything here but `probe_image` is pure: raw text in,
facts out, facts in, YAML out. Unknown stays unknown (null), and the YAML leaves out what it cannot prove.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from imagebuild.adapters.docker_engine import find_image, start
from imagebuild.catalog import osfamily
from imagebuild.components import aws_ofi_nccl, efa_installer, libfabric, nccl, openmpi, torch
from imagebuild.errors import UserError
from imagebuild.variant import INSPECT_CONTAINER_LABEL
from imagebuild.versions import is_version

# The probe's facts are keyed by the components' own names (the blocks own them).
NCCL, TORCH, OPENMPI, LIBFABRIC = nccl.NAME, torch.NAME, openmpi.NAME, libfabric.NAME
AWS_OFI_NCCL, EFA_INSTALLER = aws_ofi_nccl.NAME, efa_installer.NAME

PROBE_DIR = "/tmp/efa-image-build-inspect"
PROBE_FILES = ("inspect_probe.sh", "inspect_probe.py")
PROBE_TIMEOUT_S = 300
CONTAINER_LABEL = INSPECT_CONTAINER_LABEL
# base.os values the matrix schema accepts (imagebuild/matrix/schema.py BaseSpec.os)
KNOWN_OS = osfamily.NAMES
# The probe's order (inspect_probe.sh): a framework's Python first (the AL2023 DLC's venv, the Ubuntu DLC's
# /usr/local, conda), then the OS's.
_PYTHONS = ("/opt/venv/bin/python", "/usr/local/bin/python3", "/opt/conda/bin/python", "/usr/bin/python3")
_FRAMEWORK_PYTHONS = _PYTHONS[:3]


# ---------------------------------------------------------------- raw probe output -> facts (pure)


def split_sections(text: str) -> Dict[str, str]:
    """`@@name` lines start sections; the text of each, stripped. A missing `@@end` means a cut-off probe."""
    out: Dict[str, str] = {}
    name: Optional[str] = None
    lines: List[str] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            if name is not None:
                out[name] = "\n".join(lines).strip()
            name, lines = line[2:].strip(), []
        else:
            lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines).strip()
    return out


def nccl_version(code: Optional[int]) -> Optional[str]:
    """ncclGetVersion's code as x.y.z. NCCL 2.9 changed it to MAJOR*10000+MINOR*100+PATCH (before: *1000)."""
    if code is None or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def libfabric_version(fi_info: str) -> Optional[str]:
    """`fi_info --version` prints `libfabric: 1.17.0` (and `fi_info: ...`, `libfabric api: ...`)."""
    m = re.search(r"^libfabric:\s*(\S+)", fi_info, re.M)
    return m.group(1) if m else None


def openmpi_version(text: str) -> Optional[str]:
    """`ompi_info --version` -> `Open MPI v4.1.4`; `mpirun --version` -> `mpirun (Open MPI) 4.1.4`."""
    m = re.search(r"(?:Open MPI|OpenRTE)\)?\s+v?(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def efa_record(text: str) -> Optional[Dict[str, Any]]:
    """/opt/amazon/efa_installed_packages as efa_installer.sh writes it: `# EFA installer version: X`,
    `# Debug packages installed: ...`, `# Packages installed:` then the package file names."""
    if not text.strip():
        return None
    m = re.search(r"^#\s*EFA installer version:\s*(\S+)", text, re.M)
    version = m.group(1) if m and is_version(m.group(1)) else None
    packages = [p for line in text.splitlines() if not line.startswith("#") for p in line.split()]
    return {"version": version, "packages": packages, "header": (m.group(0) if m else None)}


def cuda_version(version_json: str, files: List[str]) -> Optional[Dict[str, str]]:
    """CUDA from /usr/local/cuda/version.json (NVIDIA's images), else a versioned libcudart file name."""
    if version_json.strip():
        try:
            ver = json.loads(version_json)["cuda"]["version"]
            return {"version": str(ver), "source": "/usr/local/cuda/version.json"}
        except (ValueError, KeyError, TypeError):
            pass
    for path in files:
        m = re.search(r"libcudart\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
        if m:
            return {"version": m.group(1), "source": path}
    return None


def os_name(os_release: str) -> Dict[str, Optional[str]]:
    """ID + VERSION_ID as the matrix spells it (`debian12`, `ubuntu22.04`, `amzn2023`); `matrix` is None if
    unknown, `family` the package manager family (imagebuild/catalog/osfamily.py)."""
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', os_release, re.M))
    ident = (fields.get("ID", "") + fields.get("VERSION_ID", "")) or None
    known = osfamily.from_os_release(fields.get("ID", ""), fields.get("VERSION_ID", ""))
    return {
        "id": ident,
        "pretty": fields.get("PRETTY_NAME"),
        "matrix": known,
        "family": osfamily.family(known).label if known else None,
    }


def _tool_path(text: str) -> Optional[str]:
    m = re.match(r"#\s*(\S+)", text)
    return m.group(1) if m else None


def facts(image: str, raw: str, repo_digests: Optional[List[str]] = None) -> Dict[str, Any]:
    """Everything the probe saw, parsed. Raises UserError when the probe did not finish.
    `repo_digests`: the engine's RepoDigests of the image; none means it was made here, never pulled or
    pushed (`local`: the matrix says `base.local: true`, not a registry_arg)."""
    sec = split_sections(raw)
    if "end" not in sec:
        raise UserError(
            f"the probe did not finish in image {image}; its output ends with: "
            + (raw.strip().splitlines() or ["(nothing)"])[-1][:200],
            key="IMAGE",
        )
    files = sorted(set(sec.get("files", "").split()))
    py_path = sec.get("python") or None
    py: Optional[Dict[str, Any]] = None
    if py_path:
        try:
            py = json.loads(sec.get("python-probe", "").splitlines()[-1])
        except (ValueError, IndexError):
            py = {"error": sec.get("python-probe", "")[-300:] or "no output"}
        py["path"] = py_path
    nccl = [{**n, "version": nccl_version(n.get("code"))} for n in ((py or {}).get(NCCL) or [])] or [
        {"path": f, "version": None, "error": "no python to load it"} for f in files if _is_nccl(f)
    ]
    fi = sec.get("fi_info", "")
    mpi = sec.get("mpi", "")
    out: Dict[str, Any] = {
        "image": image,
        "arch": sec.get("arch") or None,
        "os": os_name(sec.get("os-release", "")),
        "python": (
            {"path": py_path, "version": py.get("version"), "error": py.get("error")}
            if py is not None
            else None
        ),
        NCCL: nccl,
        LIBFABRIC: {
            "version": libfabric_version(fi),
            "fi_info": _tool_path(fi),
            "libraries": [f for f in files if "/libfabric.so" in f],
        },
        AWS_OFI_NCCL: {"plugins": [f for f in files if "/libnccl-net" in f]},
        OPENMPI: {
            "version": openmpi_version(mpi),
            "tool": _tool_path(mpi),
            "libraries": [f for f in files if "/libmpi.so" in f],
        },
        EFA_INSTALLER: efa_record(sec.get("efa_installed_packages", "")),
        "cuda": cuda_version(sec.get("cuda_version_json", ""), files),
        TORCH: (py or {}).get(TORCH),
    }
    out["kind"] = base_kind(out)
    out["local"] = repo_digests is not None and not repo_digests
    return out


def _is_nccl(path: str) -> bool:
    return re.search(r"/libnccl\.so(\.\d+)*$", path) is not None


def base_kind(f: Dict[str, Any]) -> str:
    """`dlc`: the EFA stack under /opt/amazon next to a framework Python (the DLC layout); `cuda`: NVIDIA's
    /usr/local/cuda; else `local`."""
    amazon = any(
        p.startswith("/opt/amazon/")
        for p in f[LIBFABRIC]["libraries"] + f[OPENMPI]["libraries"] + f[AWS_OFI_NCCL]["plugins"]
    )
    py = (f.get("python") or {}).get("path")
    in_site = any("-packages/" in (n.get("path") or "") for n in f[NCCL])
    framework = py in _FRAMEWORK_PYTHONS or bool(f.get(TORCH)) or in_site
    if amazon and framework:
        return "dlc"
    if f.get("cuda") and str(f["cuda"].get("source", "")).startswith("/usr/local/cuda"):
        return "cuda"
    return "local"


# ---------------------------------------------------------------- facts -> matrix lines (pure)


def _q(text: str) -> str:
    return json.dumps(text)  # a YAML double-quoted scalar: versions stay strings


def _release(text: Optional[str]) -> Optional[str]:
    """`2.7.1+cu128` -> `2.7.1`: the matrix wants the release; the local part is in the comment."""
    if not text:
        return None
    head = re.match(r"\d+(\.\d+)*", text)
    return head.group(0) if head else None


def nccl_prefix(paths: List[str]) -> Optional[str]:
    """The `prefix` of the NCCL a job uses, from the library paths found (`<prefix>/lib/libnccl.so...`).

    torch's wheel NCCL (`.../site-packages/nvidia/nccl`) when there is one: it is what torch loads, and the
    catalog's DLC default names one Python's site-packages (3.12), so another Python's base needs it written
    or the lock points at a folder the image lacks (the `nccl-torch-loads` check then fails). Else the one
    prefix all paths share; None when they differ or a path is not `<prefix>/lib/...` (lib64: no prefix)."""
    prefixes = []
    for path in paths:
        m = re.match(r"^(/.+)/lib/libnccl\.so[.0-9]*$", path)
        prefixes.append(m.group(1) if m else None)
    wheel = sorted({p for p in prefixes if nccl.is_wheel_home(p)})
    if len(wheel) == 1:
        return wheel[0]
    if len(set(prefixes)) == 1 and prefixes[0]:
        return prefixes[0]
    return None


def chosen_nccl(f: Dict[str, Any]) -> Dict[str, Any]:
    """The NCCL a job uses: torch's own if torch reports one, else the only version found; else none.
    `prefix`: where it lies (nccl_prefix), None when that is unclear."""
    versions = sorted({n["version"] for n in f[NCCL] if n.get("version")})
    torch_nccl = (f.get(TORCH) or {}).get(NCCL)
    if torch_nccl:
        version = ".".join(str(p) for p in torch_nccl)
        where = [n["path"] for n in f[NCCL] if n.get("version") in (None, version)]
        return {"version": version, "why": "torch.cuda.nccl.version()", "prefix": nccl_prefix(where)}
    if len(versions) == 1:
        where = [n["path"] for n in f[NCCL] if n.get("version") == versions[0]]
        return {
            "version": versions[0],
            "why": "ncclGetVersion in " + ", ".join(where),
            "prefix": nccl_prefix(where),
        }
    if versions:
        return {"version": None, "why": "several NCCL versions: " + ", ".join(versions), "prefix": None}
    return {"version": None, "why": "no NCCL library answered ncclGetVersion", "prefix": None}


def matrix_lines(f: Dict[str, Any]) -> str:
    """A variant-body fragment in the matrix's syntax (docs/matrix.md), to paste into a variant."""
    image = f["image"]
    kind = f["kind"]
    repo, host = _strip_host(image)
    lines = [
        f"# efa-image-build inspect-base {repo} ({f.get('arch') or 'unknown arch'}): paste into a variant"
    ]
    lines += ["base:", f"  image: {repo}", f"  kind: {kind}"]
    if f.get("local"):
        lines.append("  local: true   # only in this engine (no registry digest): made here, never pulled")
    elif kind == "dlc" or host:
        lines.append("  registry_arg: BASE_REGISTRY   # the registry host is given at build time, never here")
    osn = f["os"]
    if osn.get("matrix"):
        lines.append(f"  os: {osn['matrix']}   # OS packages with {osn['family']}")
    else:
        lines.append(
            f"  # os: {osn.get('id') or 'unknown'} is not one the matrix knows ({', '.join(KNOWN_OS)})"
        )
    py = f.get("python")
    if py and py.get("path"):
        lines.append(f"  python: {py['path']}   # Python {py.get('version') or '(version unknown)'}")
    else:
        lines.append("  # python: none found (" + ", ".join(_PYTHONS) + ")")
    cuda = f.get("cuda")
    if cuda and _release(cuda["version"]):
        major_minor = ".".join(_release(cuda["version"]).split(".")[:2])  # type: ignore[union-attr]
        lines.append(f"cuda: {_q(major_minor)}   # {cuda['version']} from {cuda['source']}")
    lines.append("components:")
    comps = _component_lines(f)
    lines += comps or ["  {}"]
    return "\n".join(lines) + "\n"


def _component_lines(f: Dict[str, Any]) -> List[str]:
    out: List[str] = []

    def base(name: str, version: Optional[str], why: str, prefix: Optional[str] = None) -> None:
        rel = _release(version)
        where = f", prefix: {_q(prefix)}" if prefix else ""
        if rel:
            out.append(f"  {name}: {{version: {_q(rel)}, source: {{base: true}}{where}}}   # {why}")
        else:
            out.append(f"  # {name}: left out: {why}")

    torch = f.get(TORCH)
    if torch and not torch.get("cuda") and not torch.get(NCCL):
        # a CPU build (the local DLC-layout base's): no NCCL of its own, so its torch-nccl check could only
        # say unknown, and unknown never passes; said here, not written as a line that cannot pass
        cpu = f"torch {torch.get('version')} is a CPU build (no CUDA, no NCCL of its own)"
        out.append(f"  # {TORCH}: left out: {cpu}")
    elif torch:
        base(TORCH, torch.get("version"), f"torch {torch.get('version')}, CUDA {torch.get('cuda')}")
    if f[NCCL] or torch:
        n = chosen_nccl(f)
        # where the catalog would not look by default (another Python's site-packages): written, so the
        # lines build and check as pasted
        base(NCCL, n["version"], n["why"], _wheel_nccl_prefix(f, n["version"]))
    for name, tool in ((LIBFABRIC, "fi_info"), (OPENMPI, "tool")):
        comp = f[name]
        if comp["version"] or comp["libraries"]:
            where = comp[tool] or ", ".join(comp["libraries"])
            base(name, comp["version"], f"{where} --version" if comp["version"] else f"{where}: no tool ran")
    plugins = f[AWS_OFI_NCCL]["plugins"]
    if plugins:
        base(AWS_OFI_NCCL, None, "plugin at " + ", ".join(plugins) + ": version not readable, write it")
    efa = f.get(EFA_INSTALLER)
    if efa:
        said = f"EFA installer {efa['version']}" if efa["version"] else "no installer version"
        out.append(
            f"  # efa_installer: /opt/amazon/efa_installed_packages records {said}; not a base component"
        )
    return out


def _wheel_nccl_prefix(f: Dict[str, Any], version: Optional[str]) -> Optional[str]:
    """The site-packages NCCL (torch's wheel) of the chosen version, when it is not where the matrix would
    put it by default (the catalog's `base_prefix` for the base's kind and OS): a Python other than the
    DLC's (3.11 in a local stand-in, a conda env) needs `prefix` written, or the checks look elsewhere."""
    osn = f["os"].get("matrix")
    wheels = {
        n["path"].rsplit("/lib/", 1)[0]
        for n in f[NCCL]
        if n.get("version") == version and "-packages/nvidia/nccl/lib/" in (n.get("path") or "")
    }
    if not version or not osn or len(wheels) != 1:
        return None
    (found,) = wheels
    default = nccl.BLOCK.default_prefix("base", {}, f["kind"], osn)
    return None if found == default else found


def _strip_host(image: str) -> tuple:
    """(repository without a registry host, the host or None): hosts never go into a matrix."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest, first
    return image, None


def text_report(f: Dict[str, Any]) -> str:
    """The facts for a reader, then the matrix lines."""
    py = f.get("python")
    rows = [
        ("image", f["image"]),
        ("kind", f"{f['kind']} (what the layout looks like)"),
        ("arch / os", f"{f.get('arch')} / {f['os'].get('pretty') or f['os'].get('id')}"),
        ("python", f"{py['path']} {py.get('version') or py.get('error')}" if py else "none found"),
    ]
    for n in f[NCCL]:
        rows.append(
            (
                NCCL,
                f"{n['version'] or 'unknown'}  {n['path']}" + (f"  ({n['error']})" if n.get("error") else ""),
            )
        )
    if not f[NCCL]:
        rows.append((NCCL, "none found"))
    fab = f[LIBFABRIC]
    rows.append((LIBFABRIC, f"{fab['version'] or 'unknown'}  {', '.join(fab['libraries']) or 'no library'}"))
    rows.append(("aws-ofi-nccl", ", ".join(f[AWS_OFI_NCCL]["plugins"]) or "no plugin"))
    mpi = f[OPENMPI]
    rows.append(
        (
            OPENMPI,
            f"{mpi['version'] or 'unknown'}  {mpi['tool'] or ', '.join(mpi['libraries']) or 'not found'}",
        )
    )
    efa = f.get(EFA_INSTALLER)
    rows.append(
        (
            "efa installer",
            (efa["version"] or efa["header"] or "record without version") if efa else "no record",
        )
    )
    cuda = f.get("cuda")
    rows.append(("cuda", f"{cuda['version']} ({cuda['source']})" if cuda else "not found"))
    t = f.get(TORCH)
    rows.append(
        (TORCH, f"{t.get('version')} cuda {t.get('cuda')} nccl {t.get(NCCL)}" if t else "not importable")
    )
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n\n" + matrix_lines(f)


# ---------------------------------------------------------------- the docker adapter


def _probe_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in PROBE_FILES:
            data = (Path(__file__).with_name(name)).read_bytes()
            info = tarfile.TarInfo(f"{PROBE_DIR.lstrip('/')}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def probe_image(client, image: str, timeout: int = PROBE_TIMEOUT_S) -> str:
    """Run the probe in a throwaway container of `image` (no network, as root); its stdout."""
    img = find_image(client, image)
    if img is None:
        raise UserError(
            f"no such image on the docker engine: {image}",
            key="IMAGE",
            hint="pull or build it first (`docker images` lists what the engine has)",
        )
    container = client.containers.create(
        img.id,
        entrypoint=["/bin/sh", f"{PROBE_DIR}/inspect_probe.sh"],
        command=[],
        user="root",
        network_disabled=True,
        name=f"efa-inspect-{uuid.uuid4().hex[:10]}",
        labels={CONTAINER_LABEL: "1"},
    )
    try:
        container.put_archive("/", _probe_tar())
        refused = start(container)
        if refused is not None:
            raise UserError(f"image {image} cannot run the probe (/bin/sh): {refused}", key="IMAGE")
        try:
            container.wait(timeout=timeout)
        except Exception:  # noqa: BLE001 - requests' timeout types vary by version; all mean "too slow"
            raise UserError(f"the probe in {image} ran longer than {timeout} s", key="IMAGE") from None
        return container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
    finally:
        container.remove(force=True)


def inspect(client, image: str) -> Dict[str, Any]:
    raw = probe_image(client, image)  # says so when the engine lacks the image
    return facts(image, raw, client.images.get(image).attrs.get("RepoDigests") or [])
