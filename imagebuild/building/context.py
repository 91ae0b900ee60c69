"""The build context docker receives: the artifacts and build CA staged into context/, the Dockerfile as
sent (the build CA added, `--mount` flags out for the classic builder) and the tar both builders read.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Tuple

from imagebuild.building.artifacts import artifacts_from_lock, stage
from imagebuild.building.contenthash import image_tags, memo_hash
from imagebuild.errors import UserError
from imagebuild.render.dockerfile import ca_stages, with_build_ca
from imagebuild.safefile import atomic_file

if TYPE_CHECKING:
    from imagebuild.building.options import BuildOptions

DEFAULT_CA = "/etc/ssl/certs/ca-certificates.crt"
CA_IN_CONTEXT = Path("certs") / "build-ca.crt"
DOCKERFILE_IN_TAR = ".efa-image-build.Dockerfile"


# A RUN instruction's BuildKit-only cache mount flag, with the blanks after it.
_MOUNT_FLAG = re.compile(r"--mount=\S+[ \t]*")


def classic_dockerfile(text: str) -> str:
    """The rendered Dockerfile for the classic builder: each RUN's `--mount=...` flags out, all else as is.

    The classic builder refuses `RUN --mount` ("requires BuildKit"). The rendered file stays the one that is
    hashed and tagged, so both builders give the same tags and labels; the templates end each mounted step
    with a cleanup that runs only where no mount is (partials/system.j2 `apt_clean`): the same files.
    Flags may continue over `\\` lines; a flag-only line left empty is dropped.
    """
    out: List[str] = []
    continued = in_flags = False
    for line in text.splitlines(keepends=True):
        if not continued:
            head = re.match(r"[ \t]*RUN[ \t]+", line, re.IGNORECASE)
            in_flags = bool(head)
            lead = head.group(0) if head else ""
        else:
            lead = line[: len(line) - len(line.lstrip(" \t"))]
        rest = line[len(lead) :]
        if in_flags and not rest.lstrip().startswith("#"):
            stripped = rest
            while _MOUNT_FLAG.match(stripped):
                stripped = _MOUNT_FLAG.sub("", stripped, count=1)
            if stripped != rest and stripped.strip() == "\\" and continued:
                line = ""  # a continuation line that held only flags
            else:
                line = lead + stripped
            in_flags = stripped.strip() in ("\\", "")
        body = line.rstrip("\r\n")
        if line or not continued:
            continued = body.endswith("\\") and not body.lstrip().startswith("#")
        out.append(line)
    return "".join(out)


def sent_dockerfile(variant_dir: Path, classic: bool = False) -> str:
    """The Dockerfile docker is given: the rendered one (the one hashed) with the build CA in its builder
    stages where a CA is staged (`with_build_ca`: `--build-ca` works whether or not the matrix asked for it),
    and without `--mount` flags for the classic builder (`classic_dockerfile`)."""
    text = (variant_dir / "Dockerfile").read_text()
    if (variant_dir / "context" / CA_IN_CONTEXT).is_file():
        text = with_build_ca(text)
    return classic_dockerfile(text) if classic else text


def write_context_tar(variant_dir: Path, dest, classic: bool = False) -> None:
    """The build context as docker receives it: context/ at the root, `sent_dockerfile` beside it."""

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    with tarfile.open(fileobj=dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dockerfile = variant_dir / "Dockerfile"
        data = sent_dockerfile(variant_dir, classic).encode()
        info = norm(tar.gettarinfo(dockerfile, arcname=DOCKERFILE_IN_TAR))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        ctx = variant_dir / "context"
        for dirpath, dirnames, filenames in os.walk(ctx):
            dirnames.sort()
            rel = Path(dirpath).relative_to(ctx)
            if rel != Path("."):
                tar.add(dirpath, arcname=rel.as_posix(), recursive=False, filter=norm)
            for name in sorted(filenames):
                if name.startswith(".tmp-"):
                    continue
                tar.add(Path(dirpath) / name, arcname=(rel / name).as_posix(), filter=norm)


def prepare_context(variant_dir: Path, lock: dict, opts: BuildOptions, log) -> None:
    ctx = variant_dir / "context"
    ctx.mkdir(exist_ok=True)
    certs = ctx / "certs"
    certs.mkdir(exist_ok=True)
    ca_dest = ctx / CA_IN_CONTEXT
    ca = opts.build_ca
    if ca is None and (lock.get("options") or {}).get("build_ca"):
        # The matrix asked for it (option build_ca): its Dockerfile COPYs the file, so give the default.
        ca = Path(DEFAULT_CA)
        if not ca.is_file():
            raise UserError(
                f"variant {variant_dir.name} needs a build CA (option build_ca) and {DEFAULT_CA} is missing",
                key="--build-ca",
                hint="pass --build-ca PATH",
            )
    if ca:
        if not ca_dest.exists() or ca_dest.read_bytes() != ca.read_bytes():
            with atomic_file(ca_dest) as tmp:
                shutil.copyfile(ca, tmp)
        stages = ca_stages((variant_dir / "Dockerfile").read_text())
        where = f"builder stages {', '.join(stages)}" if stages else "no builder stage here"
        log(f"build CA: {ca} -> context/{CA_IN_CONTEXT} ({where}; never the final image)")
    elif ca_dest.exists():
        ca_dest.unlink()
    arts = artifacts_from_lock(lock, str(variant_dir / "variant.lock.json"))
    for name, sha in stage(opts.cache, arts, ctx):
        log(f"artifact {name} sha256 {sha}")


def stage_variant(
    variant_dir: Path, lock: dict, opts: BuildOptions, log, base: Optional[str] = None
) -> Tuple[str, List[str]]:
    """Stage the artifacts (and CA) of `lock` into the context, hash it with the base's identity `base`:
    (context hash, tags)."""
    prepare_context(variant_dir, lock, opts, log)
    chash = memo_hash(variant_dir, base)
    return chash, image_tags(lock, chash)


def ca_used(variant_dir: Path, opts: BuildOptions) -> Optional[str]:
    """The CA bundle builder stages trusted in this build (None: none was staged)."""
    if not (variant_dir / "context" / CA_IN_CONTEXT).is_file():
        return None
    return str(opts.build_ca or DEFAULT_CA)


def resolve_ca(value: Optional[str]) -> Optional[Path]:
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise UserError(f"CA bundle not found: {path}", key="--build-ca", hint=f"default is {DEFAULT_CA}")
    from imagebuild.safefile import read_regular

    # bounded (a huge file is refused here, not copied into every context), and PEM certificates
    if b"-----BEGIN CERTIFICATE-----" not in read_regular(str(path), MAX_CA_BYTES, key="--build-ca"):
        raise UserError("not a PEM CA bundle (no BEGIN CERTIFICATE)", file=str(path), key="--build-ca")
    return path


MAX_CA_BYTES = 8 * 1024 * 1024  # the system bundle is about 200 KB
