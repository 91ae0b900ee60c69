"""Resolve one merged matrix entry into a Variant: fill pins from the catalog, check completeness and
compatibility, apply the env policy. Pure (reads only the catalog and the training folder's existence).

Every problem is a UserError at the file:line of the key it is about, so the user can fix the matrix.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from imagebuild import catalog
from imagebuild import components as blocks
from imagebuild.catalog import osfamily, platforms
from imagebuild.components import efa_installer as efa_block
from imagebuild.errors import UserError
from imagebuild.matrix import compat, envpolicy, osrules, requirements, schema
from imagebuild.matrix.expand import Expanded
from imagebuild.matrix.yamlsrc import where
from imagebuild.variant import (
    TITLE_LABEL,
    VARIANT_LABEL,
    Artifact,
    BaseImage,
    Component,
    CustomCheck,
    EnvVar,
    Training,
    Variant,
    version_label,
)
from imagebuild.versions import Version, is_version

_METHODS = {
    "url": ("source", "installer"),
    "git": ("source",),
    "pypi": ("wheel",),
    "apt": ("apt", "packages"),
    "installer": ("installer",),
    "base": ("base",),
}
# PyTorch DLCs from 2.7 (cu128) have no conda: Python is built into /usr/local/bin (FIELD-NOTES;
# aws/deep-learning-containers pytorch/training/docker/2.7/py3/cu128/Dockerfile.gpu and its base image).
_DEFAULT_PYTHON = {"local": "/usr/bin/python3", "cuda": "/usr/bin/python3", "dlc": "/usr/local/bin/python3"}


def _default_python(kind: str, os_name: str) -> str:
    """The base's interpreter when the matrix names none: a DLC's by its OS (AL2023: /opt/venv/bin/python,
    imagebuild/catalog/osfamily.py), else by kind."""
    if kind == "dlc" and osfamily.spec(os_name).dlc_python:
        return str(osfamily.spec(os_name).dlc_python)
    return _DEFAULT_PYTHON[kind]


EFA = efa_block.NAME
_TARGET_HINTS = {
    "efa-without-plugin": "add components.aws_ofi_nccl (from the EFA installer or source), or set "
    "options.nccl_net: socket if TCP between nodes is what you want",
    "socket-with-plugin": "drop options.nccl_net, or drop components.aws_ofi_nccl",
    "cuda-arch-unknown": "set options.cuda_arch to the GPUs' architecture (e.g. 100)",
    "cuda-arch-coverage": "add the architecture to options.cuda_arch, or leave it unset: the default covers "
    "every instance type",
}


class _Ctx:
    def __init__(self, m: Expanded) -> None:
        self.m = m

    def error(self, message: str, key: str, hint: Optional[str] = None) -> UserError:
        loc: List[Any] = []
        for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
            loc.append(int(part[1:-1]) if part.startswith("[") else part)
        where_ = where(self.m.body, loc, self.m.file, self.m.line)
        return UserError(f"variant '{self.m.name}': {message}", key=key, hint=hint, **where_)


def _apt_upstream(pin: str) -> str:
    """`libfabric1=1.17.0-3` -> `1.17.0`; `libnccl2=2.18.5-1+cuda12.2` -> `2.18.5` (no epoch/revision)."""
    ver = pin.split("=", 1)[1]
    ver = ver.split(":", 1)[1] if ":" in ver else ver
    return re.split(r"[-~+]", ver, maxsplit=1)[0]


def _catalog_source(
    ctx: _Ctx, key: str, block: blocks.Block, spec: schema.ComponentSpec, bundled: bool
) -> schema.SourceSpec:
    """The source the catalog pins when the matrix names none: installer URL, bundle, wheel or git commit."""
    name, version, method = block.name, spec.version, spec.method
    cat = catalog.component(name)
    if block is efa_block.BLOCK:
        if version is None:
            raise ctx.error("missing version", f"{key}.version")
        fields = efa_block.BLOCK.catalog_source(version)
        if fields is None:
            raise ctx.error(
                f"EFA installer {version} is not in the catalog",
                f"{key}.version",
                hint="give source: {url: https://..., sha256: ...} (or gpg_fingerprint), or pick one of "
                + ", ".join(catalog.efa_installers()["versions"]),
            )
        return schema.SourceSpec(**fields)
    if bundled:
        return schema.SourceSpec(installer=EFA)
    if method == "wheel" or (method is None and block.default_method == "wheel"):
        cuda = ctx.m.spec.cuda
        major = Version(cuda).parts[0] if cuda else None
        machine = platforms.platform(ctx.m.spec.platform or platforms.DEFAULT).machine
        candidates = list((cat.get("wheels") or {}).get(version or "") or [])
        wheels = [
            w
            for w in candidates
            if (major is None or w.get("cuda_major") == major) and w.get("arch", "x86_64") == machine
        ]
        if not wheels:
            built = ", ".join(f"CUDA {w.get('cuda_major')} {w.get('arch', 'x86_64')}" for w in candidates)
            raise ctx.error(
                f"no pinned wheel for {name} {version}"
                + (f" built for CUDA {major}" if major else "")
                + f" on {machine}"
                + (f" in the catalog (it has: {built})" if built else " in the catalog"),
                f"{key}.version",
                hint="give source: {pypi: name==version, filename: ..., sha256: ...}",
            )
        wheel = wheels[0]
        extra = None
        asked = block.extra_wheels(spec.params or {}, wheel)
        if asked is not None:
            extra = [schema.WheelSpec(**w) for w in asked[1]]
            if not extra:
                raise ctx.error(
                    f"the catalog has no build toolkit for {name} {version}", f"{key}.params.{asked[0]}"
                )
        return schema.SourceSpec(
            pypi=wheel["pypi"], filename=wheel["filename"], sha256=wheel["sha256"], build_wheels=extra
        )
    if method in (None, "source") and cat.get("git"):
        if version is None:
            raise ctx.error("missing version", f"{key}.version")
        commit = (cat.get("commits") or {}).get(version)
        if not commit:
            raise ctx.error(
                f"no pinned commit for {name} {version} in the catalog",
                f"{key}.version",
                hint="give source: {git: https://..., commit: <40 hex>}; known: "
                + ", ".join(cat.get("commits") or {}),
            )
        return schema.SourceSpec(git=cat["git"], commit=commit)
    raise ctx.error("needs a source (url, git, pypi, apt, installer or base)", f"{key}.source")


def _method(ctx: _Ctx, key: str, block: blocks.Block, spec: schema.ComponentSpec, kind: str) -> str:
    """The install method: as written, else the first that fits the source and the block supports."""
    method = spec.method or next((m for m in _METHODS[kind] if m in block.methods), _METHODS[kind][0])
    if method not in _METHODS[kind]:
        raise ctx.error(
            f"method {method} does not fit a {kind} source (use {' or '.join(_METHODS[kind])})",
            f"{key}.method",
        )
    if method not in block.methods:
        raise ctx.error(
            f"{block.name} cannot be installed with method {method} "
            f"(a partial exists for: {', '.join(block.methods)})",
            f"{key}.method" if spec.method else f"{key}.source",
        )
    return method


def _bundled_version(ctx: _Ctx, key: str, block: blocks.Block, version: Optional[str], efa_spec: Any) -> str:
    """The version the EFA installer bundles (from the catalog); a different one written is an error."""
    if efa_spec is None:
        raise ctx.error(f"source installer needs {EFA} in the same variant", f"{key}.source")
    efa_info = catalog.efa_installer(efa_spec.version) if efa_spec.version else None
    known = efa_info.get(block.installer_key(dict(efa_spec.params or {}))) if efa_info else None
    if version is None:
        if not known:
            raise ctx.error(
                f"the catalog does not say which {block.name} EFA installer {efa_spec.version} "
                "bundles; write its version",
                f"{key}.version",
            )
        return str(known)
    if known and Version(version) != Version(str(known)):
        raise ctx.error(
            f"EFA installer {efa_spec.version} bundles {block.name} {known}, not {version}",
            f"{key}.version",
        )
    return version


def _artifacts(ctx: _Ctx, key: str, source: schema.SourceSpec, version: str) -> Tuple[Artifact, ...]:
    """The files the Dockerfile COPYs for a url, git or pypi source (the build host fetches them)."""
    if source.kind == "url":
        fname = source.filename or posixpath.basename(source.url or "")
        sig_url = source.signature_url or (f"{source.url}.sig" if source.gpg_fingerprint else None)
        key_url = source.key_url
        if source.gpg_fingerprint and not key_url:
            raise ctx.error(
                "gpg_fingerprint needs key_url (the public key to check)", f"{key}.source.key_url"
            )
        return (
            Artifact(
                kind="url",
                filename=fname,
                sha256=source.sha256,
                url=source.url,
                gpg_fingerprint=source.gpg_fingerprint.replace(" ", "") if source.gpg_fingerprint else None,
                signature_url=sig_url,
                key_url=key_url,
                signature_file=f"{fname}.sig" if source.gpg_fingerprint else None,
                key_file=posixpath.basename(key_url) if key_url else None,
            ),
        )
    if source.kind == "git":
        repo = posixpath.basename((source.git or "").rstrip("/"))
        repo = repo[:-4] if repo.endswith(".git") else repo
        return (
            Artifact(
                kind="git",
                filename=f"{repo}-{source.commit}.tar",
                sha256=source.sha256,
                url=source.git,
                commit=source.commit,
            ),
        )
    if source.kind == "pypi":
        req = source.pypi or ""
        if Version(req.split("==", 1)[1]) != Version(version):
            raise ctx.error(f"version {version} but the wheel pin is {req}", f"{key}.version")
        return (
            Artifact(kind="pypi", filename=source.filename or "", sha256=source.sha256, requirement=req),
        ) + tuple(
            Artifact(kind="pypi", filename=w.filename, sha256=w.sha256, requirement=w.pypi)
            for w in source.build_wheels or ()
        )
    return ()


def _params(ctx: _Ctx, key: str, block: blocks.Block, given: Dict[str, Any]) -> Dict[str, str]:
    """The block's parameters: each given one checked against its allowed values, the rest defaulted."""
    declared = block.params
    for pname, pvalue in given.items():
        if pname not in declared:
            raise ctx.error(
                f"unknown parameter '{pname}' for {block.name} (parameters: {', '.join(declared) or 'none'})",
                f"{key}.params.{pname}",
            )
        if str(pvalue) not in [str(v) for v in declared[pname]]:
            raise ctx.error(
                f"parameter {pname}={pvalue} not allowed (one of: {', '.join(map(str, declared[pname]))})",
                f"{key}.params.{pname}",
            )
    params = {p: str(vals[0]) for p, vals in declared.items()}
    params.update({k: str(v) for k, v in given.items()})
    return params


def _component(ctx: _Ctx, name: str, spec: schema.ComponentSpec, present: Dict[str, Any]) -> Component:
    key = f"components.{name}"
    block = blocks.block(name)
    efa_spec = present.get(EFA)
    source, version = spec.source, spec.version
    bundled = (source is not None and source.kind == "installer") or (
        source is None and EFA in present and block.bundled and spec.method in (None, "installer")
    )
    if version is None and not bundled:
        raise ctx.error("missing version", f"{key}.version", hint=f'write {key}.version: "<release>"')
    if source is None:
        source = _catalog_source(ctx, key, block, spec, bundled)
    kind = source.kind
    method = _method(ctx, key, block, spec, kind)
    if kind == "installer":
        version = _bundled_version(ctx, key, block, version, efa_spec)
    if version is None:
        raise ctx.error("missing version", f"{key}.version")
    packages: Tuple[str, ...] = ()
    dev_packages: Tuple[str, ...] = ()
    if kind == "apt":
        packages = tuple(source.apt or ())
        dev_packages = tuple(source.apt_dev or ())
        upstream = _apt_upstream(packages[0]) if packages else None
        if upstream is not None and not is_version(upstream):
            raise ctx.error(
                f"the apt pin {packages[0]!r} holds no upstream version number", f"{key}.source.apt"
            )
        if upstream and Version(upstream) != Version(version):
            raise ctx.error(
                f"version {version} but the apt pin {packages[0]} is {upstream}", f"{key}.version"
            )
        for i, pin in enumerate(packages):
            if blocks.apt_by_upstream(pin) is not None and _apt_upstream(pin) != version:
                raise ctx.error(
                    f"the apt pin {pin} asks for upstream {_apt_upstream(pin)}, the component is {version}",
                    f"{key}.source.apt[{i}]",
                    hint=f"a pin by upstream version is name=[epoch:]{version}-*",
                )
        for i, pin in enumerate(dev_packages):
            if blocks.apt_by_upstream(pin) is not None:
                raise ctx.error(
                    f"apt_dev pin {pin}: builder-only packages are pinned exactly (name=version)",
                    f"{key}.source.apt_dev[{i}]",
                )
    artifacts = _artifacts(ctx, key, source, version)
    params = _params(ctx, key, block, dict(spec.params or {}))
    efa_params = dict((efa_spec.params if efa_spec is not None else None) or {})
    base_kind = (ctx.m.spec.base.kind if ctx.m.spec.base else None) or "local"
    base_os = (ctx.m.spec.base.os if ctx.m.spec.base else None) or ""
    return Component(
        name=name,
        version=version,
        method=method,
        source=kind,
        prefix=spec.prefix or block.default_prefix(kind, efa_params, base_kind, base_os),
        packages=packages,
        dev_packages=dev_packages,
        params=tuple(sorted(params.items())),
        artifacts=artifacts,
        bundled_by=EFA if kind == "installer" else None,
    )


def _layout_env(comps: Dict[str, Component], platform: str, os_name: str) -> List[EnvVar]:
    """PATH and LD_LIBRARY_PATH for the components' own prefixes (system prefixes need nothing)."""
    seen, bindirs = blocks.layout_dirs(list(comps.values()), platform, osfamily.family(os_name))
    out = []
    src = "component layout (imagebuild/catalog)"
    if seen:
        out.append(
            EnvVar(
                "LD_LIBRARY_PATH",
                ":".join(seen) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}",
                "component libraries first (also in /etc/ld.so.conf.d for jobs that reset it)",
                src,
                "layout",
            )
        )
    if bindirs:
        out.append(
            EnvVar(
                "PATH",
                ":".join(bindirs) + ":${PATH}",
                "component tools (mpirun, fi_info, nccl-tests)",
                src,
                "layout",
            )
        )
    return out


def _runtime_image(ctx: _Ctx, base: schema.BaseSpec) -> Optional[str]:
    """The image the shipped stages start from. A CUDA `-devel` base ships its `-runtime` twin of the same
    version and OS, as AWS's DLC base does (aws/deep-learning-containers docker/base/cu132/Dockerfile, commit
    e0ecedea: the runtime stage is FROM nvidia/cuda:<version>-runtime-<os>, GDRCopy is built in a -devel
    stage and copied in): nvcc, headers and static libraries stay in the builder."""
    image = base.image or ""
    if base.runtime_image:
        if base.kind != "cuda":
            raise ctx.error(
                "base.runtime_image splits a CUDA base into a -devel builder and a runtime image; a "
                f"{base.kind} base is one image",
                "base.runtime_image",
            )
        if "-devel" in base.runtime_image.split(":")[-1]:
            raise ctx.error(
                f"base.runtime_image {base.runtime_image!r} is a -devel image: compilers and headers "
                "would ship",
                "base.runtime_image",
                hint="use the -runtime (or -base) image of the same CUDA version and OS",
            )
        return base.runtime_image
    name, _, digest = image.partition("@")
    repo, _, tag = name.rpartition(":")
    if base.kind != "cuda" or not repo or "-devel" not in tag:
        return None
    if digest:
        raise ctx.error(
            "a -devel CUDA base pinned by digest: its -runtime twin has a digest of its own, which cannot be "
            "derived, and without it compilers and headers would ship",
            "base.image",
            hint="set base.runtime_image to the -runtime image of the same version, pinned by its digest too",
        )
    return f"{repo}:{tag.replace('-devel', '-runtime', 1)}"


def _base(ctx: _Ctx, spec: schema.VariantBody) -> BaseImage:
    """The base image, complete (image, kind, OS) and consistent (a registry only for a remote image)."""
    if spec.base is None or not spec.base.image:
        raise ctx.error("missing base.image", "base.image")
    if not spec.base.kind:
        raise ctx.error("missing base.kind (local, dlc or cuda)", "base.kind")
    if not spec.base.os:
        raise ctx.error("missing base.os", "base.os")
    if spec.base.local and spec.base.registry_arg:
        raise ctx.error(
            "base.local: true is an image of the local engine: it has no registry (drop registry_arg)",
            "base.local",
        )
    if spec.base.kind == "dlc" and not spec.base.registry_arg and not spec.base.local:
        raise ctx.error(
            "a DLC base lives on a private registry: set base.registry_arg (e.g. BASE_REGISTRY)",
            "base.registry_arg",
            hint="an image made on this machine (`efa-image-build base --layout dlc`): set base.local: true",
        )
    return BaseImage(
        spec.base.image, spec.base.kind, spec.base.os, spec.base.registry_arg, _runtime_image(ctx, spec.base)
    )


def _training(ctx: _Ctx, t: schema.TrainingSpec) -> Training:
    """The training folder next to the matrix, its entry point and its requirements file, checked."""
    if not t.source_dir or not t.entry_point:
        raise ctx.error("training needs source_dir and entry_point", "training")
    folder = os.path.normpath(os.path.join(ctx.m.folder, t.source_dir))
    if not os.path.isdir(folder):
        raise ctx.error(
            f"training.source_dir {t.source_dir!r} is not a folder next to the matrix",
            "training.source_dir",
        )
    if not os.path.isfile(os.path.join(folder, t.entry_point)):
        raise ctx.error(f"entry point {t.entry_point!r} not found in {t.source_dir}", "training.entry_point")
    reqs = requirements.RequirementsFile(0, False)
    if t.requirements:
        req_path = os.path.join(folder, t.requirements)
        if not os.path.isfile(req_path):
            raise ctx.error(
                f"requirements {t.requirements!r} not found in {t.source_dir}", "training.requirements"
            )
        try:
            with open(req_path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as err:
            raise ctx.error(
                f"requirements {t.requirements!r} not readable in {t.source_dir}: {err}",
                "training.requirements",
            ) from None
        reqs = requirements.scan(
            text, os.path.join(os.path.dirname(ctx.m.file), t.source_dir, t.requirements)
        )
    return Training(
        t.source_dir,
        t.entry_point,
        t.requirements,
        True if t.sagemaker is None else t.sagemaker,
        install_requirements=reqs.requirements > 0,
        require_hashes=reqs.hashed,
    )


def resolve(m: Expanded) -> Variant:
    """The Variant of one expanded body: everything it needs travels in `m` (its folder included)."""
    ctx = _Ctx(m)
    spec = m.spec
    base = _base(ctx, spec)
    python = spec.base.python or _default_python(spec.base.kind, spec.base.os)

    cspecs = {k: v for k, v in (spec.components or {}).items() if v is not None}
    comps: Dict[str, Component] = {}
    present: Dict[str, Any] = dict(cspecs)
    for name in blocks.NAMES:
        if name in cspecs:
            comps[name] = _component(ctx, name, cspecs[name], present)
    ordered = tuple(comps.values())
    refusal = osrules.package_refusal(spec.base.os, spec.packages or ()) or next(
        (r for c in ordered for r in [osrules.component_refusal(spec.base.os, c.name, c.method)] if r), None
    )
    if refusal:
        raise ctx.error(refusal[0], refusal[1], hint=refusal[2])
    if EFA in comps:
        rule = efa_block.BLOCK.base_rule(comps[EFA], spec.base.kind)
        if rule:
            raise ctx.error(rule[0], f"components.{EFA}.{rule[1]}", hint=rule[2])

    instance_types = tuple(spec.instance_types or ())
    profiles = catalog.instances()
    for i, itype in enumerate(instance_types):
        if itype not in profiles:
            raise ctx.error(
                f"unknown instance type '{itype}' (known: {', '.join(profiles)})", f"instance_types[{i}]"
            )
    facts = envpolicy.StackFacts(tuple((c.name, c.version) for c in ordered), instance_types)
    user_env = dict(spec.env or {})
    findings = envpolicy.lint(user_env, facts)
    ignored = set(spec.lint_ignore or ())
    env: List[EnvVar] = []
    policy = envpolicy.policy_env(facts)
    for e in policy:
        if e.name not in user_env:
            env.append(e)
    platform = spec.platform or platforms.DEFAULT
    env += _layout_env(comps, platform, spec.base.os)

    training = _training(ctx, spec.training) if spec.training is not None else None
    if training is not None and training.sagemaker:
        env.append(
            EnvVar(
                "SAGEMAKER_PROGRAM",
                training.entry_point,
                "the script SageMaker's training toolkit runs",
                "SageMaker training toolkit (SAGEMAKER_PROGRAM, /opt/ml/code)",
                "training",
            )
        )
    for name in sorted(user_env):
        env.append(EnvVar(name, user_env[name], "set by the matrix (env:)", m.file, "user"))

    forb = [f for f in envpolicy.forbidden(facts) if f.name not in user_env]
    options = spec.options or schema.OptionsSpec()
    arch = options.cuda_arch
    if arch is None:
        archs = sorted(
            {profiles[t].get("cuda_arch") for t in instance_types if profiles[t].get("cuda_arch")}, key=int
        )
        arch = ";".join(archs) or "90"
    for p in compat.check(comps, spec.cuda, env, options.cuda_arch):
        raise ctx.error(p.message + f" [{p.source}]", p.key)
    for p in compat.targets(comps, instance_types, profiles, options.cuda_arch, options.nccl_net):
        raise ctx.error(p.message + f" [{p.source}]", p.key, hint=_TARGET_HINTS[p.rule])

    labels = {
        TITLE_LABEL: m.name,
        VARIANT_LABEL: m.name,
    }
    if spec.description:
        labels["org.opencontainers.image.description"] = spec.description
    for c in ordered:
        labels[version_label(c.name)] = c.version
    if spec.cuda:
        labels[version_label("cuda")] = spec.cuda
    labels.update(spec.labels or {})
    lint = tuple(
        (f.severity if f.name not in ignored else "ignored", f.name, f.message + f" [{f.source}]")
        for f in findings
    )
    return Variant(
        name=m.name,
        base=base,
        python=python,
        cuda=spec.cuda,
        components=ordered,
        packages=tuple(spec.packages or ()),
        env=tuple(env),
        env_forbidden=tuple(forb),
        labels=tuple(sorted(labels.items())),
        tags=tuple(spec.tags or ()),
        channels=tuple(dict.fromkeys(spec.channels or ())),
        instance_types=instance_types,
        training=training,
        options=tuple(
            sorted(
                {
                    "build_ca": bool(options.build_ca),
                    "cuda_arch": arch,
                    "jobs": options.jobs or 0,
                    "nccl_net": options.nccl_net or ("ofi" if compat.OFI in comps else "socket"),
                }.items()
            )
        ),
        description=spec.description or "",
        axes=m.axes,
        matrix=os.path.basename(m.file),
        platform=platform,
        build_steps=tuple(spec.build_steps or ()),
        checks=tuple(
            CustomCheck.of(n, c.model_dump(mode="json", exclude_none=True))
            for n, c in sorted((spec.checks or {}).items())
            if c is not None
        ),
        lint=lint,
    )
