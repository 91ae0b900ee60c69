"""node-check's checks of the image: the env the image was built with, the NCCL net plugin the loader
finds, and the libfabric that plugin binds. Every fail here is `configure`: the image's contents or the job's
settings, software to fix and rerun, never the node's hardware.

Split from nodecheck.py, which stays importable alone (images under check copy it beside their inventory): the
loader lookup (plugin_names, library_candidates, find_library, ldconfig_cache) and the lock stay there.
"""

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from efa_validators.node.nodecheck import (
    LOCK_ENV,
    Check,
    check,
    ev,
    find_library,
    ldconfig_cache,
    load_lock,
    plugin_names,
    run_tool,
)


def image_checks(env: Dict[str, str]) -> List[Check]:
    """env-policy, nccl-net-plugin and libfabric: what the image holds and the job's env keeps."""
    lock, where = load_lock(env)
    checks = [check_env_policy(lock, where, env)]
    ldcache = ldconfig_cache()
    plugin_check, plugin = check_plugin(env, ldcache)
    return checks + [plugin_check, check_libfabric(plugin, env, ldcache)]


def _env_matches(want: Optional[str], have: Optional[str]) -> bool:
    """A value like `/opt/x/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}` was expanded by the image's ENV:
    it holds if every literal path of it is still in the list; a plain value must be equal."""
    if want is None:
        return have is None
    if "$" not in want:
        return have == want
    if have is None:
        return False
    literal = re.sub(r"\$\{[^}]*\}+|\$[A-Za-z_][A-Za-z0-9_]*", ":", want)
    parts = [p for p in literal.split(":") if p and p != "+"]
    return all(p in have.split(":") for p in parts)


def check_env_policy(lock: Optional[Dict[str, Any]], where: str, env: Dict[str, str]) -> Check:
    """The env the image was built with (the lock's `env`, `env_forbidden`) must still hold at run time:
    a launcher or job spec that drops or overrides one silently changes NCCL's behaviour. A fail is
    configure: the image's or the job's settings."""
    if lock is None:
        return check("env-policy", "unknown", "no variant lock at %s (set %s)" % (where, LOCK_ENV))
    if "_error" in lock:
        return check("env-policy", "unknown", "variant lock %s unreadable: %s" % (where, lock["_error"]))
    wrong, evidence = [], []
    for item in lock.get("env") or []:
        name, value = item.get("name"), item.get("value")
        if not name:
            continue
        have = env.get(name)
        if item.get("overridable") and not _env_matches(value, have):
            # a site default (NCCL_SOCKET_IFNAME): the cluster's own interface names may replace it
            evidence.append(
                ev(where, "%s: image default %r, the job sets %r (a site setting)" % (name, value, have))
            )
            continue
        if not _env_matches(value, have):
            wrong.append(name)
            evidence.append(
                ev(where, "%s: image sets %r, now %r (%s)" % (name, value, have, item.get("reason", "")))
            )
    for item in lock.get("env_forbidden") or []:
        name = item.get("name")
        if name and name in env:
            wrong.append(name)
            evidence.append(
                ev(where, "%s=%r is set but forbidden: %s" % (name, env[name], item.get("reason", "")))
            )
    count = len(lock.get("env") or []) + len(lock.get("env_forbidden") or [])
    if wrong:
        why = "differs from the image's policy: %s" % ", ".join(wrong)
        return check("env-policy", "fail", why, evidence, "configure")
    return check(
        "env-policy",
        "pass",
        "%d rule(s) of %s hold (variant %s)" % (count, where, lock.get("name")),
        evidence,
    )


def ldd_resolves(lib: str) -> Tuple[Optional[Dict[str, Optional[str]]], str]:
    """soname -> path (None = "not found") for a shared object, by `ldd`; (None, why) without ldd."""
    rc, out = run_tool(["ldd", lib])
    if rc is None:
        return None, out
    if rc != 0:  # not a dynamic object, or ldd itself failed: what it printed is no resolution
        return None, "ldd exited %d: %s" % (rc, out.strip()[:200])
    deps = {}  # type: Dict[str, Optional[str]]
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return deps, out


def check_plugin(env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]) -> Tuple[Check, Optional[str]]:
    """Which net plugin NCCL will load; none means NCCL silently uses its socket transport. A fail is
    configure: the image's contents or NCCL_NET_PLUGIN / LD_LIBRARY_PATH, software to fix and rerun."""
    names = plugin_names(env)
    if not names:
        return check(
            "nccl-net-plugin",
            "fail",
            "NCCL_NET_PLUGIN=none: NCCL will not load the EFA plugin",
            [],
            "configure",
        ), None
    evidence = []
    for name in names:
        hits = find_library(name, env, ldcache)
        for h in hits:
            evidence.append(ev("loader search", "%s -> %s (%s)" % (name, h, os.path.realpath(h))))
        if hits:
            others = []
            if ldcache is not None:
                others = sorted(k for k in ldcache if k.startswith("libnccl-net") and k != name)
            detail = "NCCL will load %s" % hits[0]
            if len(hits) > 1:
                detail += " (%d copies on the search path; the first wins)" % len(hits)
            if others:
                detail += "; also installed: %s" % ", ".join(others)
            return check("nccl-net-plugin", "pass", detail, evidence), hits[0]
    where = "LD_LIBRARY_PATH=%s" % env.get("LD_LIBRARY_PATH", "")
    if ldcache is None:
        return (
            check(
                "nccl-net-plugin",
                "unknown",
                "%s not on %s and ldconfig unavailable" % (" or ".join(names), where),
            ),
            None,
        )
    return (
        check(
            "nccl-net-plugin",
            "fail",
            "%s not found on %s or in the ldconfig cache: NCCL would use sockets"
            % (" or ".join(names), where),
            [ev("ldconfig -p", "no %s" % n) for n in names],
            "configure",
        ),
        None,
    )


def check_libfabric(
    plugin: Optional[str], env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]
) -> Check:
    """The libfabric the plugin binds to at run time; two libfabrics on the path is a known failure. A fail
    is configure: what the image installed and its loader path."""
    copies = find_library("libfabric.so.1", env, ldcache)
    evidence = [ev("loader search", "libfabric.so.1 -> %s (%s)" % (c, os.path.realpath(c))) for c in copies]
    if plugin is not None:
        deps, out = ldd_resolves(plugin)
        if deps is None:
            return check("libfabric", "unknown", "cannot run ldd on the plugin: %s" % out, evidence)
        missing = sorted(k for k, v in deps.items() if v is None)
        evidence += [
            ev("ldd %s" % plugin, line.strip())
            for line in out.splitlines()
            if "fabric" in line or "not found" in line
        ]
        if missing:
            why = "the plugin's libraries are not found: %s" % ", ".join(missing)
            return check("libfabric", "fail", why, evidence, "configure")
        bound = deps.get("libfabric.so.1")
        if bound is None:
            return check("libfabric", "unknown", "the plugin does not link libfabric.so.1 directly", evidence)
        detail = "the plugin binds %s" % bound
        if len(copies) > 1:
            detail += "; other copies on the search path: %s" % ", ".join(c for c in copies if c != bound)
        return check("libfabric", "pass", detail, evidence)
    if not copies:
        status = "fail" if ldcache is not None else "unknown"
        return check("libfabric", status, "no libfabric.so.1 on the loader's path", evidence, "configure")
    detail = "the loader would pick %s (plugin not found, so not confirmed by ldd)" % copies[0]
    return check("libfabric", "unknown", detail, evidence)
