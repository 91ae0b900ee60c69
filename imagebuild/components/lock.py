"""A Variant back from its lock, the components in the block registry's order.

Why here and not in imagebuild.variant: the order is the registry's (each block's `layer`), and the model must
not import the blocks that read it (no import circle between the two).
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild import components as blocks
from imagebuild.catalog import platforms
from imagebuild.errors import UserError
from imagebuild.variant import (
    LOCK_SCHEMA,
    Artifact,
    BaseImage,
    Component,
    CustomCheck,
    EnvVar,
    ForbiddenEnv,
    Training,
    Variant,
)


def variant_from_lock(lock: Mapping[str, Any], where: str = "variant.lock.json") -> Variant:
    """Read a lock back; a malformed lock is a UserError naming the key."""
    try:
        return _from_lock(lock)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UserError(f"not a valid variant lock: {err!r}", file=where) from None


def _from_lock(lock: Mapping[str, Any]) -> Variant:
    if lock.get("schema") != LOCK_SCHEMA:
        raise UserError(f"lock schema is {lock.get('schema')!r}, expected {LOCK_SCHEMA!r}", key="schema")
    comps: List[Component] = []
    for name, c in dict(lock["components"]).items():
        arts = tuple(
            Artifact(
                kind=a["kind"],
                filename=a["filename"],
                sha256=a.get("sha256"),
                url=a.get("url"),
                commit=a.get("commit"),
                requirement=a.get("requirement"),
                gpg_fingerprint=a.get("gpg_fingerprint"),
                signature_url=a.get("signature_url"),
                key_url=a.get("key_url"),
                signature_file=a.get("signature_file"),
                key_file=a.get("key_file"),
            )
            for a in c.get("artifacts") or []
        )
        comps.append(
            Component(
                name=name,
                version=str(c["version"]),
                method=c["method"],
                source=c.get("source") or c["method"],
                prefix=c.get("prefix"),
                packages=tuple(c.get("packages") or ()),
                dev_packages=tuple(c.get("dev_packages") or ()),
                params=tuple(sorted((str(k), str(v)) for k, v in (c.get("params") or {}).items())),
                artifacts=arts,
                bundled_by=c.get("bundled_by"),
            )
        )
    comps.sort(key=lambda c: blocks.order_key(c.name))
    base = lock["base"]
    tr = lock.get("training")
    return Variant(
        name=lock["name"],
        description=lock.get("description") or "",
        matrix=lock.get("matrix") or "",
        axes=tuple(sorted((lock.get("axes") or {}).items())),
        base=BaseImage(
            image=base["image"],
            kind=base["kind"],
            os=base["os"],
            registry_arg=base.get("registry_arg"),
            runtime_image=base.get("runtime_image"),
        ),
        cuda=lock.get("cuda"),
        python=lock["python"],
        packages=tuple(lock.get("packages") or ()),
        components=tuple(comps),
        env=tuple(
            EnvVar(
                e["name"],
                e["value"],
                e["reason"],
                e["source"],
                e.get("origin", "policy"),
                bool(e.get("overridable")),
            )
            for e in lock.get("env") or []
        ),
        env_forbidden=tuple(
            ForbiddenEnv(f["name"], f["reason"], f["source"], f.get("severity", "warning"))
            for f in lock.get("env_forbidden") or []
        ),
        labels=tuple(sorted((lock.get("labels") or {}).items())),
        tags=tuple(lock.get("tags") or ()),
        instance_types=tuple(lock.get("instance_types") or ()),
        training=None
        if not tr
        else Training(
            source_dir=tr["source_dir"],
            entry_point=tr["entry_point"],
            requirements=tr.get("requirements"),
            sagemaker=bool(tr.get("sagemaker", True)),
            code_dir=tr.get("code_dir", "/opt/ml/code"),
            install_requirements=bool(tr.get("install_requirements", False)),
            require_hashes=bool(tr.get("require_hashes", False)),
        ),
        platform=lock.get("platform") or platforms.DEFAULT,
        build_steps=tuple(lock.get("build_steps") or ()),
        checks=tuple(CustomCheck.of(n, spec) for n, spec in sorted(dict(lock.get("checks") or {}).items())),
        options=tuple(sorted((lock.get("options") or {}).items())),
    )
