"""The verified artifact cache: every byte a Dockerfile uses beyond OS packages is fetched once, here.

A variant lock lists, per component, the artifacts its Dockerfile COPYs from `context/artifacts/`:
  {"kind": "url",  "url": "https://...", "sha256": "<64 hex>", "file": "x.tar.gz",
   "gpg_fingerprint": "<40 hex, optional>", "signature_url": "...", "key_url": "..."}
  {"kind": "git",  "url": "https://github.com/o/r", "commit": "<40 hex>", "file": "r-<commit>.tar"}
  {"kind": "pypi", "requirement": "name==1.2.3", "sha256": "<64 hex of the wheel>", "file": "<wheel name>"}
The build host fetches each once into the cache (`.cache/artifacts/` by default), verifies it
(sha256; git: the checked-out HEAD is the pinned commit, then a deterministic `git archive`; pypi:
`pip download --no-deps --only-binary :all:` then the wheel's sha256; a GPG signature against a keyring
holding only the pinned fingerprint), and links it into the build context. Every write goes through
`safefile.atomic_file` (a temporary name in the same folder, renamed into place when whole, removed on any
error), so a full disk or an error leaves either the old state or the complete, verified file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from imagebuild.errors import UserError, redact
from imagebuild.safefile import atomic_file
from imagebuild.variant import Artifact

DEFAULT_CACHE = Path(".cache") / "artifacts"
SUMS_FILE = "SHA256SUMS"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_CHUNK = 1 << 20

Say = Callable[[str], None]


class ArtifactError(Exception):
    """An artifact could not be fetched or failed verification: the variant that needs it must not build."""


# ---------------------------------------------------------------- reading the lock (pure)


def artifacts_from_lock(lock: dict, where: str = "variant.lock.json") -> List[Artifact]:
    """Every url/git/pypi artifact the lock's components list, checked for a usable pin."""
    out: List[Artifact] = []
    components = lock.get("components") or {}
    if not isinstance(components, dict):
        raise UserError("components must be a mapping", file=where, key="components")
    for cname in sorted(components):
        comp = components[cname] or {}
        entries = comp.get("artifacts") or []
        if not isinstance(entries, list):
            raise UserError("artifacts must be a list", file=where, key=f"components.{cname}.artifacts")
        for i, entry in enumerate(entries):
            out.append(_artifact(cname, entry, where, f"components.{cname}.artifacts[{i}]"))
    return out


def _artifact(component: str, entry: dict, where: str, key: str) -> Artifact:
    if not isinstance(entry, dict):
        raise UserError("an artifact must be a mapping", file=where, key=key)
    kind = entry.get("kind") or (
        "git" if entry.get("commit") or entry.get("git") else "pypi" if entry.get("pypi") else "url"
    )
    url = entry.get("url") or entry.get("git")
    sha = (entry.get("sha256") or "").lower() or None
    fpr = (entry.get("gpg_fingerprint") or "").replace(" ", "").upper() or None
    given_name = entry.get("filename") or entry.get("file")
    if fpr and not re.fullmatch(r"[0-9A-F]{40}", fpr):
        raise UserError(
            f"gpg_fingerprint is not 40 hex digits: {fpr!r}", file=where, key=f"{key}.gpg_fingerprint"
        )
    if kind == "url":
        if not url or not str(url).startswith("https://"):
            raise UserError(f"url must be https: {url!r}", file=where, key=f"{key}.url")
        if not (sha and _HEX64.fullmatch(sha)) and not (fpr and not sha):
            raise UserError(
                "url artifact needs a sha256 of 64 hex digits (or a gpg_fingerprint)",
                file=where,
                key=f"{key}.sha256",
            )
        name = given_name or os.path.basename(urllib.parse.urlparse(url).path)
        commit = requirement = None
    elif kind == "git":
        commit = (entry.get("commit") or "").lower()
        if not url:
            raise UserError("git artifact needs a url", file=where, key=f"{key}.url")
        if not _HEX40.fullmatch(commit):
            raise UserError(
                f"git artifact needs a 40-hex commit, not {commit!r}",
                file=where,
                key=f"{key}.commit",
                hint="pin a commit, never a branch or tag: a commit is content addressed",
            )
        repo = os.path.basename(urllib.parse.urlparse(str(url)).path.rstrip("/")).removesuffix(".git")
        name = given_name or f"{repo}-{commit}.tar"
        requirement = None
    elif kind == "pypi":
        requirement = entry.get("requirement") or entry.get("pypi")
        if not requirement or not re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9._+!-]+", str(requirement)):
            raise UserError(
                f"pypi artifact needs name==version, not {requirement!r}",
                file=where,
                key=f"{key}.requirement",
            )
        if not sha or not _HEX64.fullmatch(sha):
            raise UserError("pypi artifact needs the wheel's sha256", file=where, key=f"{key}.sha256")
        name = given_name or ""
        commit = None
    else:
        raise UserError(f"unknown artifact kind {kind!r} (url, git, pypi)", file=where, key=f"{key}.kind")
    if name and not _SAFE_FILE.fullmatch(name):
        raise UserError(f"artifact file name not allowed: {name!r}", file=where, key=f"{key}.file")
    pip_args = tuple(str(a) for a in entry.get("pip_args") or ())
    return Artifact(
        component=component,
        kind=kind,
        filename=name,
        url=str(url) if url else None,
        sha256=sha,
        commit=commit,
        requirement=requirement,
        gpg_fingerprint=fpr,
        signature_url=entry.get("signature_url") or (f"{url}.sig" if fpr and url else None),
        key_url=entry.get("key_url"),
        signature_file=_safe_name(entry.get("signature_file"), where, f"{key}.signature_file"),
        key_file=_safe_name(entry.get("key_file"), where, f"{key}.key_file"),
        pip_args=pip_args,
    )


def _safe_name(name: Optional[str], where: str, key: str) -> Optional[str]:
    if name is not None and not _SAFE_FILE.fullmatch(str(name)):
        raise UserError(f"artifact file name not allowed: {name!r}", file=where, key=key)
    return name


def mirrored(url: str, mirror: Optional[str]) -> str:
    """Where to fetch `url` from: upstream, or `<mirror>/<host>/<path>` for air-gapped sites.

    The host stays in the mirror path so one mirror can serve several upstreams without clashes; the bytes are
    verified against the pin either way, so a mirror may be plain http or a local folder (file://).
    """
    if not mirror:
        return url
    parts = urllib.parse.urlparse(url)
    base = mirror.rstrip("/")
    if "://" not in base:
        base = Path(base).resolve().as_uri()
    return f"{base}/{parts.netloc}{parts.path}"


# ---------------------------------------------------------------- hashing and atomic writes


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _write_json_atomic(path: Path, data: dict) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")


def _download(url: str, dest: Path, timeout: float = 60.0) -> str:
    """Stream `url` into `dest`, returning the sha256 of what was written."""
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:  # noqa: S310
            for block in iter(lambda: resp.read(_CHUNK), b""):
                h.update(block)
                out.write(block)
    except OSError as err:  # URLError, HTTPError, ENOSPC, EFBIG ... all mean "not fetched"
        raise ArtifactError(redact(f"cannot fetch {url}: {err}")) from err
    return h.hexdigest()


def _run(cmd: List[str], cwd: Optional[Path] = None, env: Optional[dict] = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        text = f"`{' '.join(cmd[:4])} ...` failed (exit {proc.returncode}): " + " | ".join(tail)
        raise ArtifactError(redact(text))
    return proc.stdout


def _local_repo(src: str, work: Path) -> str:
    """`src`, or for a local bare repository without its `refs/` folder a stand-in git accepts.

    Why: git refuses a repository without `refs/`, and that folder is empty in a `git clone --mirror` whose
    refs are all packed; copies that drop empty folders (a tar without them, some syncs, read-only shares)
    then lose it. The stand-in holds the mirror's HEAD, config and packed refs and borrows its objects
    through `objects/info/alternates`: nothing is copied, the mirror is never written, and the commit is
    verified after checkout as for any source.
    """
    if not src.startswith("file://"):
        return src
    repo = Path(urllib.parse.unquote(urllib.parse.urlparse(src).path))
    if not (repo / "objects").is_dir() or (repo / "refs").is_dir():
        return src
    shim = work / "mirror.git"
    (shim / "refs").mkdir(parents=True)
    (shim / "objects" / "info").mkdir(parents=True)
    for name in ("HEAD", "config", "packed-refs"):
        if (repo / name).is_file():
            shutil.copyfile(repo / name, shim / name)
    (shim / "objects" / "info" / "alternates").write_text(f"{(repo / 'objects').resolve()}\n")
    return shim.resolve().as_uri()


# ---------------------------------------------------------------- the cache


def wheel_platforms(filename: str) -> List[str]:
    """The platform tags of a wheel's file name (PEP 427: `name-ver[-build]-py-abi-PLAT.whl`, PLAT dotted
    when compressed); none for a pure wheel (`any`) or a name that is not a wheel's."""
    if not filename.endswith(".whl") or filename.count("-") < 4:
        return []
    tags = filename[: -len(".whl")].rsplit("-", 1)[1].split(".")
    return [] if tags == ["any"] else tags


class ArtifactCache:
    """Fetch-once, verify-always store of pinned artifacts, safe for several threads and processes."""

    _locks: Dict[str, threading.Lock] = {}
    _locks_guard = threading.Lock()

    def __init__(
        self,
        root: Path = DEFAULT_CACHE,
        mirror: Optional[str] = None,
        offline: bool = False,
        say: Say = print,
    ):
        self.root = Path(root)
        self.mirror = mirror
        self.offline = offline
        self.say = say

    # -- lookups
    def _dir(self, art: Artifact) -> Path:
        return self.root / art.key

    def _lock(self, art: Artifact) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(str(self._dir(art).resolve()), threading.Lock())

    def cached(self, art: Artifact) -> Optional[Path]:
        """The verified cached file, or None. Re-hashes when the file changed since it was verified."""
        folder = self._dir(art)
        record_path = folder / "verified.json"
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            return None
        path = folder / record.get("file", "")
        try:
            st = path.stat()
        except OSError:
            return None
        if (st.st_size, st.st_mtime_ns) != (record.get("size"), record.get("mtime_ns")):
            if sha256_file(path) != record.get("sha256"):
                return None
            record.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
            _write_json_atomic(record_path, record)
        if art.sha256 and record.get("sha256") != art.sha256:
            return None
        return path

    def sha256_of(self, path: Path) -> str:
        return json.loads((path.parent / "verified.json").read_text())["sha256"]

    def missing(self, arts: Iterable[Artifact]) -> List[Artifact]:
        return [a for a in arts if self.cached(a) is None]

    # -- fetching
    def ensure(self, art: Artifact) -> Path:
        """The verified file for `art`, fetching it first unless offline. Raises ArtifactError/UserError."""
        with self._lock(art):
            hit = self.cached(art)
            if hit is not None:
                return hit
            if self.offline:
                raise UserError(
                    f"--offline and not in the artifact cache {self.root}: {art.describe()}",
                    key="--offline",
                    hint="run once without --offline (or with --mirror) to fill the cache",
                )
            folder = self._dir(art)
            folder.mkdir(parents=True, exist_ok=True)
            fetch = {"url": self._fetch_url, "git": self._fetch_git, "pypi": self._fetch_pypi}[art.kind]
            final, sha = fetch(art, folder)
            st = final.stat()
            _write_json_atomic(
                folder / "verified.json",
                {
                    "file": final.name,
                    "sha256": sha,
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                    "kind": art.kind,
                    "source": art.requirement or art.url,
                    "commit": art.commit,
                    "gpg_fingerprint": art.gpg_fingerprint,
                },
            )
            self.say(f"artifact verified: {art.describe()}")
            return final

    def _fetch_url(self, art: Artifact, folder: Path) -> Tuple[Path, str]:
        assert art.url
        src = mirrored(art.url, self.mirror)
        self.say(f"fetching {redact(src)}")
        final = folder / art.filename
        with atomic_file(final) as tmp:
            got = _download(src, tmp)
            if art.sha256 and got != art.sha256:
                raise ArtifactError(
                    f"checksum mismatch for {art.filename} from {redact(src)}: "
                    f"pinned sha256 {art.sha256}, got {got}"
                )
            if art.gpg_fingerprint:
                self._verify_gpg(art, tmp, folder)
        return final, got

    def _verify_gpg(self, art: Artifact, data: Path, folder: Path) -> None:
        """gpg --verify against a keyring that holds the pinned fingerprint's key and nothing else."""
        if not art.key_url or not art.signature_url:
            raise ArtifactError(
                f"{art.filename}: gpg_fingerprint given but no key_url/signature_url to check it"
            )
        if shutil.which("gpg") is None:
            raise UserError(
                "gpg is not installed (needed to check a pinned signature)", hint="apt-get install gpg"
            )
        with tempfile.TemporaryDirectory(prefix="efa-gpg-") as home:
            hp = Path(home)
            os.chmod(hp, 0o700)
            key, sig, ring = hp / "key.asc", hp / "data.sig", hp / "only.gpg"
            _download(mirrored(art.key_url, self.mirror), key)
            _download(mirrored(art.signature_url, self.mirror), sig)
            env = dict(os.environ, GNUPGHOME=str(hp / "import"))
            (hp / "import").mkdir(mode=0o700)
            _run(["gpg", "--batch", "--quiet", "--import", str(key)], env=env)
            # Export only the pinned key: a key file carrying extra keys must not widen who may sign.
            exported = subprocess.run(
                ["gpg", "--batch", "--export", art.gpg_fingerprint], env=env, capture_output=True, timeout=60
            ).stdout
            if not exported:
                raise ArtifactError(
                    f"{art.filename}: key at {art.key_url} does not hold fingerprint {art.gpg_fingerprint}"
                )
            ring.write_bytes(exported)
            env2 = dict(os.environ, GNUPGHOME=str(hp / "verify"))
            (hp / "verify").mkdir(mode=0o700)
            proc = subprocess.run(
                ["gpg", "--batch", "--no-default-keyring", "--keyring", str(ring), "--status-fd", "1"]
                + ["--verify", str(sig), str(data)],
                env=env2,
                capture_output=True,
                text=True,
                timeout=120,
            )
            valid = re.findall(r"^\[GNUPG:\] VALIDSIG ([0-9A-F]{40}) .* ([0-9A-F]{40})$", proc.stdout, re.M)
            signers = {fp for pair in valid for fp in pair}
            if proc.returncode != 0 or art.gpg_fingerprint not in signers:
                raise ArtifactError(
                    f"GPG signature of {art.filename} does not verify against {art.gpg_fingerprint}: "
                    + (proc.stderr.strip().splitlines() or ["no valid signature"])[-1]
                )
            for src, name in ((sig, art.signature_file), (key, art.key_file)):
                if name:  # the Dockerfile may verify again in the image: keep them beside the file
                    with atomic_file(folder / name) as tmp:
                        shutil.copyfile(src, tmp)
        self.say(f"GPG signature good: {art.filename} signed by {art.gpg_fingerprint}")

    def _fetch_git(self, art: Artifact, folder: Path) -> Tuple[Path, str]:
        assert art.url and art.commit
        src = mirrored(art.url, self.mirror)
        self.say(f"cloning {redact(src)} at {art.commit[:12]}")
        with tempfile.TemporaryDirectory(prefix=".tmp-git-", dir=folder) as work:
            repo = Path(work) / "repo"
            _run(["git", "clone", "--quiet", "--no-checkout", _local_repo(src, Path(work)), str(repo)])
            _run(["git", "-C", str(repo), "-c", "advice.detachedHead=false", "checkout", "-q", art.commit])
            head = _run(["git", "-C", str(repo), "rev-parse", "HEAD"]).strip()
            if head != art.commit:
                shown = redact(src)
                raise ArtifactError(f"{shown}: HEAD is {head} after checkout, pinned commit {art.commit}")
            prefix = art.filename.removesuffix(".tar") + "/"
            final = folder / art.filename
            with atomic_file(final) as tmp:
                # A tar (not gzip) of one commit: git writes it byte for byte the same on every host.
                with open(tmp, "wb") as out:
                    proc = subprocess.run(
                        ["git", "-C", str(repo), "archive", "--format=tar", f"--prefix={prefix}", art.commit],
                        stdout=out,
                        stderr=subprocess.PIPE,
                        timeout=600,
                    )
                if proc.returncode != 0:
                    raise ArtifactError(f"git archive of {art.commit} failed: {proc.stderr.decode()[-300:]}")
                sha = sha256_file(tmp)
            return final, sha

    def _fetch_pypi(self, art: Artifact, folder: Path) -> Tuple[Path, str]:
        assert art.requirement and art.sha256
        self.say(f"pip download {art.requirement}")
        with tempfile.TemporaryDirectory(prefix=".tmp-pip-", dir=folder) as work:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
            for tag in wheel_platforms(art.filename):  # the pinned wheel's, not this host's (an arm64 twin)
                cmd += ["--platform", tag]
            _run(cmd + ["--dest", work, *art.pip_args, art.requirement])
            wheels = sorted(Path(work).glob("*.whl"))
            if len(wheels) != 1:
                raise ArtifactError(f"pip download {art.requirement} gave {len(wheels)} wheels, expected 1")
            wheel = wheels[0]
            if art.filename and wheel.name != art.filename:
                raise ArtifactError(
                    f"pip chose {wheel.name} for {art.requirement}, the lock pins {art.filename}"
                )
            got = sha256_file(wheel)
            if got != art.sha256:
                raise ArtifactError(
                    f"checksum mismatch for {wheel.name} ({art.requirement}): "
                    f"pinned sha256 {art.sha256}, got {got}"
                )
            final = folder / wheel.name
            with atomic_file(final) as tmp:
                os.replace(wheel, tmp)
            return final, got


# ---------------------------------------------------------------- into the build context


def place(src: Path, dest: Path) -> None:
    """Hardlink `src` to `dest` (copy across filesystems), replacing whatever `dest` was, atomically. A failed
    copy (a full disk) leaves no partial file under either name, and is an ArtifactError."""
    if dest.exists() and os.path.samefile(src, dest):
        return
    try:
        with atomic_file(dest) as tmp:
            tmp.unlink()
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
    except OSError as err:
        raise ArtifactError(f"cannot stage {src.name} into {dest.parent}: {err.strerror or err}") from None


def stage(cache: ArtifactCache, arts: List[Artifact], context: Path) -> List[Tuple[str, str]]:
    """Fetch/verify every artifact and link it into `context/artifacts/`, with a SHA256SUMS file beside them.

    Returns (file, sha256) pairs. SHA256SUMS lets the Dockerfile `sha256sum -c` what it COPYs, git tarballs
    included (their sha256 is known only once the host has made them).
    """
    dest_dir = context / "artifacts"
    dest_dir.mkdir(parents=True, exist_ok=True)
    sums: List[Tuple[str, str]] = []
    for art in arts:
        path = cache.ensure(art)
        place(path, dest_dir / path.name)
        sums.append((path.name, cache.sha256_of(path)))
        for extra in (art.signature_file, art.key_file):
            if extra:
                if not (path.parent / extra).is_file():
                    raise ArtifactError(
                        f"{art.filename}: {extra} not in the cache; remove {path.parent}, refetch"
                    )
                place(path.parent / extra, dest_dir / extra)
    text = "".join(f"{sha}  {name}\n" for name, sha in sorted(set(sums)))
    sums_path = dest_dir / SUMS_FILE
    if not sums_path.exists() or sums_path.read_text() != text:
        try:
            with atomic_file(sums_path) as tmp:
                tmp.write_text(text)
        except OSError as err:
            raise ArtifactError(f"cannot write {sums_path}: {err.strerror or err}") from None
    return sums
