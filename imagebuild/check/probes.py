"""Evaluators of the checks in `imagebuild.check.expectations`: one function per probe, on a `Target`.

A Target is a running container of the image (commands go through testinfra's docker backend) plus the
image's metadata (env, labels, layer history) read from the engine. Each probe returns (status, detail);
status is pass, fail or unknown, and unknown -- evidence that could not be seen -- never passes.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from imagebuild.components import apt_by_upstream, apt_pin_matches, libfabric
from imagebuild.versions import Version

INVENTORY_PATH = "/tmp/efa-image-build-checks/inventory.py"

Outcome = Tuple[str, str]
PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"


@dataclass
class Target:
    """What a probe may look at. `run` executes a shell command in the container: (rc, stdout, stderr)."""

    run: Callable[[str], Tuple[int, str, str]]
    env: Dict[str, str]
    labels: Dict[str, str]
    history: List[str]
    lock: dict
    python: str = "python3"
    entrypoint: Optional[List[str]] = None
    config: Dict[str, Any] = field(default_factory=dict)  # the image's Config: User, WorkingDir, Cmd, ...
    _inventories: Dict[Tuple[str, ...], Tuple[Optional[dict], str]] = field(default_factory=dict, repr=False)

    def inventory(self, *args: str) -> Tuple[Optional[dict], str]:
        """Run the read-only inventory script once per question: several probes ask the same one
        (the plugin files for present/ldd/version; libnccl for ctypes and the header check)."""
        if args not in self._inventories:
            self._inventories[args] = self._ask_inventory(args)
        return self._inventories[args]

    def _ask_inventory(self, args: Tuple[str, ...]) -> Tuple[Optional[dict], str]:
        cmd = " ".join(shlex.quote(a) for a in (self.python, INVENTORY_PATH, *args))
        rc, out, err = self.run(cmd)
        if rc != 0:
            return None, f"inventory {' '.join(args)} failed (rc {rc}): {(err or out).strip()[-300:]}"
        try:
            return json.loads(out), ""
        except ValueError:
            return None, f"inventory {' '.join(args)} printed no JSON: {out[-200:]!r}"

    def first_existing(self, candidates: List[str]) -> Optional[str]:
        for c in candidates:
            if not c:
                continue
            rc, _, _ = self.run(f"test -x {shlex.quote(c)} || command -v {shlex.quote(c)} >/dev/null")
            if rc == 0:
                return c
        return None


def same_version(want: Optional[str], seen: Optional[str]) -> Optional[bool]:
    """Numeric comparison of the leading release numbers (`1.17.0-3` equals `1.17`); None if unreadable."""
    if not want or not seen:
        return None
    try:
        return Version(str(want)).parts == Version(str(seen)).parts
    except ValueError:
        return None


def _version_outcome(what: str, want: Optional[str], seen: Optional[str], where: str) -> Outcome:
    if not want:
        return UNKNOWN, f"the lock records no {what} version to compare with (saw {seen or 'nothing'})"
    same = same_version(want, seen)
    if same is None:
        return UNKNOWN, f"could not read the {what} version ({where}); lock says {want}"
    if not same:
        return FAIL, f"{what} is {seen} ({where}), the lock says {want}"
    return PASS, f"{what} {seen} ({where})"


# ---------------------------------------------------------------- metadata probes


def labels(t: Target, p: dict) -> Outcome:
    want: Dict[str, str] = p.get("labels") or {}
    bad = [
        f"{k}={t.labels.get(k)!r} (lock: {v!r})" for k, v in sorted(want.items()) if t.labels.get(k) != str(v)
    ]
    if bad:
        return FAIL, "labels differ from the lock: " + "; ".join(bad)
    return PASS, f"{len(want)} label(s) as the lock says"


_VAR = re.compile(r"\$(?:\{(\w+)(?::([-+])((?:[^{}]|\{[^{}]*\})*))?\}|(\w+))")


def expand_env(value: str, env: Dict[str, str]) -> str:
    """Docker's ENV substitution ($V, ${V}, ${V:-word}, ${V:+word}), so a lock value like
    `/opt/x/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}` compares with what the built image holds."""

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        op, word = m.group(2), m.group(3) or ""
        have = env.get(name, "")
        if op == "-":
            return have or expand_env(word, env)
        if op == "+":
            return expand_env(word, env) if have else ""
        return have

    return _VAR.sub(one, value)


def env_policy(t: Target, p: dict) -> Outcome:
    # Values are expanded the way the Dockerfile's ENV lines were: in order, over the base image's env.
    scope = dict(p.get("base_env") or {})
    want: Dict[str, str] = {}
    for k, v in (p.get("env") or {}).items():
        want[k] = expand_env(str(v), scope)
        scope[k] = want[k]
    prefixes = tuple(p.get("prefixes") or ())
    problems = []
    for k, v in sorted(want.items()):
        if k not in t.env:
            problems.append(f"{k} missing (policy: {v!r})")
        elif t.env[k] != v:
            problems.append(f"{k}={t.env[k]!r} (policy: {v!r})")
    ignore = set(p.get("ignore") or ())
    for k in sorted(t.env):
        if k.startswith(prefixes) and k not in want and k not in ignore:
            problems.append(f"{k}={t.env[k]!r} set but not in the policy")
    if problems:
        return FAIL, "; ".join(problems)
    return PASS, f"{len(want)} policy var(s) set as the lock says; no other {'/'.join(prefixes)} vars"


def env_forbidden(t: Target, p: dict) -> Outcome:
    forbidden: Dict[str, str] = p.get("forbidden") or {}
    hit = [f"{k}={t.env[k]!r} ({forbidden[k]})" for k in sorted(forbidden) if k in t.env]
    if hit:
        return FAIL, "forbidden env set: " + "; ".join(hit)
    return PASS, f"none of {len(forbidden)} forbidden var(s) set"


def no_credentials(t: Target, p: dict) -> Outcome:
    patterns = [re.compile(x) for x in p.get("patterns") or ()]
    places = [(f"env {k}", f"{k}={v}") for k, v in t.env.items()]
    places += [(f"label {k}", f"{k}={v}") for k, v in t.labels.items()]
    places += [(f"history layer {i}", h) for i, h in enumerate(t.history)]
    found = []
    for where, text in places:
        for pat in patterns:
            m = pat.search(text)
            if m:
                found.append(f"{where}: matches {pat.pattern!r} at {m.group(0)[:4]}...")
    for path in p.get("files") or ():
        rc, _, _ = t.run(f"test -e {shlex.quote(path)}")
        if rc == 0:
            found.append(f"file {path} exists")
    if found:
        return FAIL, "; ".join(found)
    return PASS, f"no credential pattern in {len(t.env)} env, {len(t.labels)} labels, {len(t.history)} layers"


# ---------------------------------------------------------------- command probes


def command(t: Target, p: dict) -> Outcome:
    rc, out, err = t.run(p["command"])
    want = int(p.get("expect_rc", 0))
    if rc != want:
        return FAIL, f"`{p['command']}` exited {rc} (want {want}): {(err or out).strip()[-300:]}"
    pattern = p.get("expect_output")
    if pattern and not re.search(pattern, out + err):
        return FAIL, f"`{p['command']}` output lacks /{pattern}/"
    return PASS, f"`{p['command']}` exited {rc}"


def nccl_ctypes(t: Target, p: dict) -> Outcome:
    inv, why = t.inventory("nccl-version")
    if inv is None:
        return UNKNOWN, why
    if inv.get("error"):
        return FAIL, f"libnccl.so.2 does not load: {inv['error']}"
    return _version_outcome(
        "NCCL", p.get("version"), inv.get("version"), f"ncclGetVersion in {inv.get('path')}"
    )


def _under(path: str, prefix: Optional[str]) -> bool:
    return bool(prefix) and path.startswith(str(prefix).rstrip("/") + "/")


def framework_nccl(t: Target, p: dict) -> Outcome:
    """The libnccl a framework's process maps (inventory `framework-nccl`): with torch in the lock,
    `import torch`; without, what torch's wheel would open (site-packages nvidia/nccl/lib). It must be the
    lock's NCCL (under its prefix, its version) and the only one in the process."""
    inv, why = t.inventory("framework-nccl", *(["--import"] if p.get("import") else []))
    if inv is None:
        return UNKNOWN, why
    loaded = list(inv.get("loaded") or [])
    how = inv.get("via") or "?"
    if inv.get("error") and not loaded:
        return FAIL, f"{how}: {inv['error']}"
    if not loaded:
        return FAIL, f"{how} mapped no libnccl"
    if len(loaded) > 1:
        return FAIL, f"{how} mapped {len(loaded)} NCCLs in one process: {', '.join(loaded)}"
    path = loaded[0]
    if p.get("prefix") and not _under(path, p["prefix"]):
        return FAIL, f"{how} loads {path}, not the lock's NCCL under {p['prefix']}"
    status, detail = _version_outcome("NCCL", p.get("version"), inv.get("version"), path)
    return status, f"{how} loads {path}: {detail}"


def _ldd_path(t: Target, binary: str, soname: str) -> Tuple[Optional[str], str]:
    rc, out, err = t.run(f"ldd {shlex.quote(binary)}")
    for ln in (out + err).splitlines():
        parts = ln.split()
        if parts and parts[0] == soname and "=>" in parts:
            target = parts[parts.index("=>") + 1]
            return (None, f"{soname} not found") if target == "not" else (target, "")
    return None, f"ldd {binary} (rc {rc}) names no {soname}"


def binary_nccl(t: Target, p: dict) -> Outcome:
    """Which libnccl.so.2 a binary (nccl-tests' all_reduce_perf) loads, by ldd, and that it is the lock's
    version; says whether it is the file torch's NCCL is (a DLC holds two)."""
    name = p["binary"]
    files, why = _find(t, name)
    if files is None:
        return UNKNOWN, why
    under = [f for f in files if _under(f, p.get("prefix"))]
    if not (under or files):
        return FAIL, f"no {name} in the image"
    binary = (under or files)[0]
    lib, problem = _ldd_path(t, binary, "libnccl.so.2")
    if lib is None:
        return FAIL, f"{binary}: {problem}"
    inv, why = t.inventory("nccl-version", lib)
    if inv is None:
        return UNKNOWN, why
    if inv.get("error"):
        return FAIL, f"{binary} loads {lib}, which does not answer ncclGetVersion: {inv['error']}"
    status, detail = _version_outcome("NCCL", p.get("version"), inv.get("version"), lib)
    framework = p.get("framework_prefix")
    if framework:
        detail += "; torch's NCCL is " + (
            "this one" if _under(lib, framework) else f"another, under {framework}"
        )
    return status, f"{binary} loads {lib}: {detail}"


def _find(t: Target, *patterns: str) -> Tuple[Optional[List[str]], str]:
    inv, why = t.inventory("find", *patterns)
    if inv is None:
        return None, why
    return list(inv.get("files") or []), ""


def _found(t: Target, patterns: Sequence[str], absent: Outcome) -> Tuple[List[str], Optional[Outcome]]:
    """The image's files matching `patterns`, or the outcome when there is none to judge: unknown where the
    inventory could not be read (fail closed), `absent` where nothing matches."""
    files, why = _find(t, *patterns)
    if files is None:
        return [], (UNKNOWN, why)
    if not files:
        return [], absent
    return files, None


def nccl_header(t: Target, p: dict) -> Outcome:
    absent = ("skip", "no nccl.h in the image (runtime-only NCCL): the ctypes check stands alone")
    files, stop = _found(t, ["nccl.h"], absent)
    if stop:
        return stop
    lib, _ = t.inventory("nccl-version")
    lib_path = (lib or {}).get("path") or ""
    prefix = p.get("prefix") or ""

    def rank(path: str) -> int:  # the header beside the resolved library first, then under the prefix
        root = lib_path.rsplit("/lib/", 1)[0] if "/lib/" in lib_path else None
        return 0 if root and path.startswith(root + "/") else 1 if prefix and path.startswith(prefix) else 2

    versions = []
    for path in sorted(files, key=rank):
        inv, why = t.inventory("header", path)
        if inv and inv.get("version"):
            versions.append((path, inv["version"]))
    if not versions:
        return UNKNOWN, f"nccl.h found ({', '.join(files)}) but no NCCL_MAJOR/MINOR/PATCH macros readable"
    path, seen = versions[0]
    status, detail = _version_outcome("NCCL (nccl.h)", p.get("version"), seen, path)
    others = [f"{pp}={v}" for pp, v in versions[1:] if not same_version(v, seen)]
    if status == PASS and others:
        return FAIL, f"{detail}; other nccl.h disagree: {', '.join(others)}"
    return status, detail


def pkgconfig_prefix(t: Target, p: dict) -> Outcome:
    """The `prefix=` line of a pkg-config file is the prefix the component is installed in."""
    path, want = p["file"], str(p.get("prefix") or "").rstrip("/")
    rc, out, err = t.run(f"cat {shlex.quote(path)}")
    if rc != 0:
        return FAIL, f"no {path} in the image: {(err or out).strip()[-200:]}"
    seen = [line.split("=", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("prefix=")]
    if not seen:
        return FAIL, f"{path} has no prefix= line"
    if seen[0].rstrip("/") != want:
        return FAIL, f"{path} says prefix={seen[0]}, but NCCL is installed in {want}"
    return PASS, f"{path}: prefix={seen[0]}"


def _upstream(version: str) -> str:
    """`1:8.9p1-3ubuntu0.17` -> `8.9p1` (dpkg: epoch before the first `:`, revision after the last `-`)."""
    rest = version.split(":", 1)[1] if ":" in version else version
    return rest.rsplit("-", 1)[0] if "-" in rest else rest


def apt_pins(t: Target, p: dict) -> Outcome:
    """The installed packages are what the component's apt pins ask: the exact version, or for a pin by
    upstream version (`name=[epoch:]upstream-*`) a build of that upstream version, the one the build
    recorded."""
    pins: List[str] = list(p.get("pins") or [])
    names = [pin.partition("=")[0] for pin in pins]
    if not names:
        return UNKNOWN, "the lock records no apt pins to compare with"
    rc, out, err = t.run(
        "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(shlex.quote(n) for n in names)
    )
    installed = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    if rc != 0 and not installed:
        return FAIL, f"dpkg-query does not know {', '.join(names)}: {(err or out).strip()[-200:]}"
    record: Optional[dict] = None
    if any(apt_by_upstream(pin) is not None for pin in pins):
        rc, text, err = t.run(f"cat {shlex.quote(p.get('record') or '')}")
        try:
            record = {r["package"]: r for r in json.loads(text)["packages"]} if rc == 0 else None
        except (ValueError, KeyError, TypeError):
            record = None
        if record is None:
            return (
                FAIL,
                f"no readable record of the resolved pins in {p.get('record')}: {(err or text)[-200:]}",
            )
    want, seen = str(p.get("version") or ""), []
    for pin, name in zip(pins, names):
        have = installed.get(name)
        if have is None:
            return FAIL, f"{name} is not installed (pin {pin})"
        if not apt_pin_matches(pin, have):
            return FAIL, f"{name} {have} is installed, the pin is {pin}"
        if want and _upstream(have) != want:
            return FAIL, f"{name} {have} is upstream {_upstream(have)}, the lock says {want}"
        if record is not None and apt_by_upstream(pin) is not None:
            rec = (record.get(name) or {}).get("version")
            if rec != have:
                return FAIL, f"{name} {have} is installed, {p.get('record')} records {rec}"
            seen.append(f"{name} {have} (pin {pin}, recorded)")
        else:
            seen.append(f"{name} {have} (pin {pin})")
    return PASS, "; ".join(seen)


def single_library(t: Target, p: dict) -> Outcome:
    soname = p["soname"]
    inv, why = t.inventory("libs", soname)
    if inv is None:
        return UNKNOWN, why
    info = inv.get(soname) or {}
    distinct = info.get("distinct") or []
    where = ", ".join(f"{c['path']} ({c['via']})" for c in info.get("candidates") or [])
    if not info.get("ldconfig_seen"):
        return UNKNOWN, f"ldconfig -p could not be read; candidates: {where or 'none'}"
    if info.get("error") or not info.get("resolved"):
        return FAIL, f"{soname} does not resolve: {info.get('error')}; candidates: {where or 'none'}"
    if len(distinct) != 1:
        return FAIL, (
            f"{len(distinct)} different {soname} on the library path ({', '.join(distinct)}); "
            f"the loader resolves {info.get('resolved')}"
        )
    return PASS, f"one {soname}: {distinct[0]} (resolved via {info.get('resolved')})"


def libfabric_version(t: Target, p: dict) -> Outcome:
    exe = t.first_existing(["fi_info", "/opt/amazon/efa/bin/fi_info"])
    if not exe:
        return UNKNOWN, "no fi_info in the image to ask libfabric its version"
    rc, out, err = t.run(f"{shlex.quote(exe)} --version")
    m = re.search(r"^libfabric:\s*(\S+)", out, re.M)
    if rc != 0 or not m:
        return UNKNOWN, f"`{exe} --version` gave rc {rc}: {(out + err).strip()[-200:]}"
    return _version_outcome(libfabric.NAME, p.get("version"), m.group(1), f"{exe} --version")


# ---------------------------------------------------------------- the plugin


def _plugin_files(t: Target, absent: str) -> Tuple[List[str], Optional[Outcome]]:
    """The plugin's libraries, or the outcome where there is none to judge (FAIL `absent`: none there)."""
    return _found(t, ["libnccl-net*.so*"], (FAIL, absent))


def plugin_present(t: Target, p: dict) -> Outcome:
    files, stop = _plugin_files(t, "no libnccl-net*.so anywhere in the image")
    if stop:
        return stop
    return PASS, "plugin library: " + ", ".join(files)


def _unresolved(
    t: Target, path: str, host: FrozenSet[str] = frozenset(), executable: bool = False
) -> Tuple[Optional[str], Set[str]]:
    """(what keeps `path` from loading, or None; the host-provided libraries it needs): ldd's `not found`
    lines, less the libraries in `host`, which the host supplies at run time."""
    run = f"ldd {shlex.quote(path)}"
    rc, out, err = t.run(f"test -x {shlex.quote(path)} && {run}" if executable else run)
    missing = [ln.strip() for ln in (out + err).splitlines() if "not found" in ln]
    waived = {ln.split()[0] for ln in missing if ln.split()[0] in host}
    missing = [ln for ln in missing if ln.split()[0] not in host]
    if rc == 0 and not missing:
        return None, waived
    failed = f"not executable or ldd rc {rc}" if executable else f"ldd rc {rc}: {(out + err).strip()[-200:]}"
    return "; ".join(missing) or failed, waived


def plugin_ldd(t: Target, p: dict) -> Outcome:
    files, stop = _plugin_files(t, "no plugin library to ldd")
    if stop:
        return stop
    bad = [f"{f}: {problem}" for f in files for problem in [_unresolved(t, f)[0]] if problem]
    if bad:
        return FAIL, " | ".join(bad)
    return PASS, f"ldd resolves every dependency of {len(files)} plugin file(s)"


def plugin_discoverable(t: Target, p: dict) -> Outcome:
    inv, why = t.inventory("plugin")
    if inv is None:
        return UNKNOWN, why
    tried = "; ".join(f"{x['name']}: {x.get('error') or x.get('resolved')}" for x in inv.get("tried") or [])
    how = f"NCCL_NET_PLUGIN={inv['env']}" if inv.get("env") else "libnccl-net.so (NCCL_NET_PLUGIN unset)"
    if not inv.get("resolved"):
        return FAIL, f"NCCL would not find a plugin by {how}: {tried}"
    return PASS, f"NCCL finds {inv['resolved_real']} by {how}"


def plugin_version(t: Target, p: dict) -> Outcome:
    files, stop = _plugin_files(t, "no plugin library to read a version from")
    if stop:
        return stop
    seen = []
    for f in files:
        inv, _ = t.inventory("grep", f, r"aws-ofi-nccl[ -]v?(\d+\.\d+\.\d+)")
        groups = (inv or {}).get("groups") or []
        if groups and groups[0]:
            seen.append((f, groups[0]))
    if not seen:
        return UNKNOWN, f"no 'aws-ofi-nccl <version>' string in {', '.join(files)}"
    f, ver = seen[0]
    return _version_outcome("aws-ofi-nccl", p.get("version"), ver, f)


def single_plugin(t: Target, p: dict) -> Outcome:
    files, stop = _plugin_files(t, "no plugin library in the image")
    if stop:
        return stop
    dirs = sorted({f.rsplit("/", 1)[0] for f in files})
    if len(dirs) != 1:
        return FAIL, f"plugin libraries in {len(dirs)} places ({', '.join(dirs)}): " + ", ".join(files)
    return PASS, f"one plugin build in {dirs[0]}: " + ", ".join(f.rsplit("/", 1)[1] for f in files)


# ---------------------------------------------------------------- EFA, MPI, nccl-tests, the rest


def efa_record(t: Target, p: dict) -> Outcome:
    path = p["path"]
    rc, out, _ = t.run(f"cat {shlex.quote(path)}")
    if rc != 0:
        return FAIL, f"{path} is missing: the EFA installer did not run (or was undone)"
    m = re.search(r"EFA installer version:\s*(\S+)", out)
    if not m:
        return UNKNOWN, f"{path} has no 'EFA installer version:' line"
    return _version_outcome("EFA installer", p.get("version"), m.group(1), path)


def fi_info_efa(t: Target, p: dict) -> Outcome:
    exe = t.first_existing([f"{p.get('prefix')}/bin/fi_info", "fi_info"])
    if not exe:
        return FAIL, "no fi_info in the image"
    rc, out, err = t.run(f"{shlex.quote(exe)} -l")
    if rc != 0:
        return UNKNOWN, f"`{exe} -l` exited {rc}: {(out + err).strip()[-200:]}"
    providers = re.findall(r"^(\w[\w;-]*):", out, re.M)
    if "efa" not in providers:
        return FAIL, f"`{exe} -l` lists no efa provider (lists: {', '.join(providers) or 'none'})"
    return PASS, f"`{exe} -l` lists efa"


def _mpirun(t: Target, p: dict) -> Optional[str]:
    prefix = p.get("prefix")
    return t.first_existing(
        [f"{prefix}/bin/mpirun" if prefix else "", "mpirun", "/opt/amazon/openmpi/bin/mpirun"]
    )


def openmpi_version(t: Target, p: dict) -> Outcome:
    exe = _mpirun(t, p)
    if not exe:
        return FAIL, "no mpirun in the image"
    rc, out, err = t.run(f"{shlex.quote(exe)} --version")
    # `mpirun (Open MPI) 4.1.4`; called by another name (the DLC's wrapper execs mpirun.real) it says OpenRTE
    m = re.search(r"(?:Open MPI|OpenRTE)\)?\s+v?(\d+\.\d+(?:\.\d+)?)", out + err)
    if not m:
        return UNKNOWN, f"`{exe} --version` names no Open MPI version: {(out + err).strip()[:200]}"
    return _version_outcome("Open MPI", p.get("version"), m.group(1), f"{exe} --version")


def mpirun_root(t: Target, p: dict) -> Outcome:
    exe = _mpirun(t, p)
    if not exe:
        return FAIL, "no mpirun in the image"
    by_env = t.env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1" and t.env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
    flag = "" if by_env else " --allow-run-as-root"
    # One local rank; no ssh needed (isolated launcher). `id -u` proves it really ran, as root.
    cmd = f"{shlex.quote(exe)}{flag} --mca plm isolated -np 1 id -u"
    rc, out, err = t.run(cmd)
    if rc != 0 or out.strip() != "0":
        return FAIL, f"`{cmd}` exited {rc}: {(err or out).strip()[-300:]}"
    how = "OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 in the image env" if by_env else "--allow-run-as-root"
    return PASS, f"mpirun runs a rank as root with {how}"


def mpirun_plain_root(t: Target, p: dict) -> Outcome:
    """`mpirun` from PATH, as root, with no --allow-run-as-root and the image's own env: what a DLC promises
    (its wrapper adds the flag). `--mca plm isolated` launches the one local rank without ssh; it is no root
    switch. Says how it was allowed: a wrapper script naming the flag, or OMPI_ALLOW_RUN_AS_ROOT in the
    env."""
    rc, where, _ = t.run("command -v mpirun")
    exe = where.strip()
    if rc != 0 or not exe:
        return FAIL, "no mpirun on PATH"
    cmd = "mpirun --mca plm isolated -np 1 id -u"
    rc, out, err = t.run(cmd)
    if rc != 0 or out.strip() != "0":
        if "allow-run-as-root" in out + err:
            return FAIL, (
                f"`{cmd}` as root ({exe}): Open MPI refuses root (exit {rc}); no wrapper adds "
                "--allow-run-as-root and OMPI_ALLOW_RUN_AS_ROOT is not set"
            )
        return FAIL, f"`{cmd}` as root ({exe}) exited {rc}: {(err or out).strip()[-300:]}"
    wrc, text, _ = t.run(f"head -c 4096 {shlex.quote(exe)} | grep -a -- --allow-run-as-root")
    if wrc == 0 and text.strip():
        how = f"{exe} is a wrapper adding the flag ({text.strip()[:120]})"
    elif t.env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1":
        how = "OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 in the image env"
    else:
        how = f"{exe} accepted root as it is"
    return PASS, f"plain `mpirun` runs a rank as root: {how}"


def mca_params(t: Target, p: dict) -> Outcome:
    """Open MPI's own view of mca params (`ompi_info --parsable`): each has the value the lock expects (a
    DLC's install_efa.sh settings), read from a file, not a default."""
    want: Dict[str, str] = p.get("params") or {}
    prefix = p.get("prefix")
    exe = t.first_existing([f"{prefix}/bin/ompi_info" if prefix else "", "ompi_info"])
    if not exe:
        return UNKNOWN, "no ompi_info in the image to ask Open MPI its mca params"
    bad, seen = [], []
    for name, value in sorted(want.items()):
        framework, component = name.split("_")[0], name.split("_")[1]
        cmd = f"{shlex.quote(exe)} --parsable --level 9 --param {framework} {component}"
        rc, out, err = t.run(cmd)
        got = re.search(rf"^mca:[^:]+:[^:]+:param:{re.escape(name)}:value:(.*)$", out, re.M)
        src = re.search(rf"^mca:[^:]+:[^:]+:param:{re.escape(name)}:source:(.*)$", out, re.M)
        if rc != 0 or not got:
            return UNKNOWN, f"`{cmd}` (rc {rc}) shows no {name}: {(err or out).strip()[-200:]}"
        source = src.group(1).strip() if src else "?"
        if got.group(1).strip() != str(value):
            bad.append(f"{name}={got.group(1).strip()!r} ({source}), want {value!r}")
        else:
            seen.append(f"{name}={value} ({source})")
    if bad:
        return FAIL, "mca params differ from the DLC's: " + "; ".join(bad)
    return PASS, "; ".join(seen)


def binaries_load(t: Target, p: dict) -> Outcome:
    """Each named binary is there, executable, and every library it links resolves, except those the host
    provides at run time (`host_provided`: libcuda.so.1 comes with the driver, injected by the NVIDIA
    container runtime, so an image must not carry it)."""
    binaries = list(p.get("binaries") or ())
    host = frozenset(p.get("host_provided") or ())
    files, why = _find(t, *binaries)
    if files is None:
        return UNKNOWN, why
    prefix = p.get("prefix")
    if prefix:
        under = [f for f in files if f.startswith(prefix.rstrip("/") + "/")]
        files = under or files
    by_name = {}
    for f in files:
        by_name.setdefault(f.rsplit("/", 1)[-1], f)
    missing = [b for b in binaries if b not in by_name]
    if missing:
        return FAIL, f"binaries missing: {', '.join(missing)}"
    bad, waived = [], set()
    for f in sorted(by_name.values()):
        problem, needs = _unresolved(t, f, host, executable=True)
        waived |= needs
        if problem:
            bad.append(f"{f}: {problem}")
    if bad:
        return FAIL, " | ".join(bad)
    host_note = f" ({', '.join(sorted(waived))} from the host's driver at run time)" if waived else ""
    return PASS, f"{len(by_name)} binaries load{host_note}: " + ", ".join(sorted(by_name.values()))


def find_library(t: Target, p: dict) -> Outcome:
    files, stop = _found(t, p["patterns"], (FAIL, f"no {' or '.join(p['patterns'])} in the image"))
    if stop:
        return stop
    return PASS, ", ".join(files)


def find_absent(t: Target, p: dict) -> Outcome:
    files, why = _find(t, *p["patterns"])
    if files is None:
        return UNKNOWN, why
    if files:
        return FAIL, "present in the image: " + ", ".join(files)
    return PASS, f"no {' or '.join(p['patterns'])} anywhere in the image"


def no_build_tools(t: Target, p: dict) -> Outcome:
    """Compilers and CUDA headers anywhere, static libraries under the components' prefixes."""
    found, why = _find(t, *p["compilers"], *p["headers"], "*.a")
    if found is None:
        return UNKNOWN, why
    prefixes = tuple(pre.rstrip("/") + "/" for pre in p.get("prefixes") or ())
    static = [f for f in found if f.endswith(".a") and f.startswith(prefixes)]
    tools = [f for f in found if not f.endswith(".a")]
    if tools or static:
        return FAIL, "in the runtime image: " + ", ".join(tools + static)
    return PASS, "no compiler, no CUDA header, no static library of a component"


def torch_nccl(t: Target, p: dict) -> Outcome:
    code = (
        "import json, torch\n"
        "v = None\n"
        "try:\n"
        "    n = torch.cuda.nccl.version()\n"
        "    v = '.'.join(str(x) for x in n) if isinstance(n, tuple) else str(n)\n"
        "except Exception as e:\n"
        "    v = None; err = repr(e)\n"
        "print(json.dumps({'version': torch.__version__, 'bundled_nccl': v}))\n"
    )
    rc, out, err = t.run(f"{shlex.quote(p.get('python') or t.python)} -c {shlex.quote(code)}")
    if rc != 0:
        return FAIL, f"torch does not import: {(err or out).strip()[-300:]}"
    try:
        info = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return UNKNOWN, f"no answer from torch: {out[-200:]!r}"
    torch, bundled = info.get("version"), info.get("bundled_nccl")
    if not bundled:
        return UNKNOWN, f"torch {torch} reports no NCCL of its own (CPU build?)"
    system = p.get("system_nccl")
    if not system:
        return UNKNOWN, f"torch {torch} bundles NCCL {bundled}; no system NCCL in the lock to compare"
    if p.get("policy") == "bundled":
        return PASS, f"torch {torch} uses its bundled NCCL {bundled} by policy (system {system})"
    if not same_version(system, bundled):
        return FAIL, f"torch {torch} bundles NCCL {bundled}, the system NCCL is {system}"
    return PASS, f"torch {torch} NCCL {bundled} matches the system's"


def sagemaker(t: Target, p: dict) -> Outcome:
    entry = p.get("entry_point")
    code_dir = p.get("code_dir") or "/opt/ml/code"
    if not entry:
        return FAIL, "the variant asks for SageMaker but names no entry_point"
    problems = []
    rc, _, _ = t.run(f"test -f {shlex.quote(code_dir + '/' + entry)}")
    if rc != 0:
        problems.append(f"{code_dir}/{entry} missing")
    if t.env.get("SAGEMAKER_PROGRAM") not in (None, entry):
        problems.append(f"SAGEMAKER_PROGRAM={t.env.get('SAGEMAKER_PROGRAM')!r}, entry point is {entry!r}")
    rc, out, _ = t.run("command -v train")
    if rc != 0 and not t.entrypoint:
        problems.append(
            "no `train` on PATH and no ENTRYPOINT (SageMaker runs the container as `IMAGE train`)"
        )
    if problems:
        return FAIL, "; ".join(problems)
    how = f"`train` is {out.strip()}" if rc == 0 else f"ENTRYPOINT {t.entrypoint} receives `train`"
    return PASS, f"{code_dir}/{entry} present; {how}"


PROBES: Dict[str, Callable[[Target, dict], Outcome]] = {
    "labels": labels,
    "env_policy": env_policy,
    "env_forbidden": env_forbidden,
    "no_credentials": no_credentials,
    "command": command,
    "nccl_ctypes": nccl_ctypes,
    "nccl_header": nccl_header,
    "single_library": single_library,
    "pkgconfig_prefix": pkgconfig_prefix,
    "apt_pins": apt_pins,
    "libfabric_version": libfabric_version,
    "plugin_present": plugin_present,
    "plugin_ldd": plugin_ldd,
    "plugin_discoverable": plugin_discoverable,
    "plugin_version": plugin_version,
    "single_plugin": single_plugin,
    "efa_record": efa_record,
    "fi_info_efa": fi_info_efa,
    "openmpi_version": openmpi_version,
    "mpirun_root": mpirun_root,
    "mpirun_plain_root": mpirun_plain_root,
    "mca_params": mca_params,
    "framework_nccl": framework_nccl,
    "binary_nccl": binary_nccl,
    "binaries_load": binaries_load,
    "find_library": find_library,
    "find_absent": find_absent,
    "no_build_tools": no_build_tools,
    "torch_nccl": torch_nccl,
    "sagemaker": sagemaker,
}


def lock_label(t: Target, p: dict) -> Outcome:
    """The image carries its lock, parseable, and it is the lock it was meant to be built from."""
    names = p.get("labels") or []
    raw = next((t.labels[n] for n in names if n in t.labels), None)
    if raw is None:
        return FAIL, f"no lock label ({' or '.join(names)}): this image was not built by this tool"
    try:
        seen = json.loads(raw)
    except ValueError as err:
        return FAIL, f"lock label is not JSON: {err}"
    if not str(seen.get("schema", "")).startswith("efa-image-build/lock/"):
        return FAIL, f"lock label has schema {seen.get('schema')!r}, not efa-image-build/lock/*"
    want = p.get("lock")
    if want is not None and seen != want:
        diff = sorted(k for k in set(seen) | set(want) if seen.get(k) != want.get(k))
        return FAIL, f"the image's lock differs from {p.get('lock_file')} in: {', '.join(diff)}"
    return PASS, f"lock {seen.get('name')!r} in the image label" + (
        f" equals {p.get('lock_file')}" if want else ""
    )


PROBES["lock_label"] = lock_label
