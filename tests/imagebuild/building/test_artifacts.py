"""The artifact cache: fetched once, verified (sha256, git commit, GPG, wheel sha256), consistent
after faults.

Every fetch goes to a real server on 127.0.0.1 (an HTTP file server standing in as the `--mirror` of the
upstream host), a real git repository, real gpg keys, and pip against a local find-links folder.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from paths import ROOT

from imagebuild.building.artifacts import (
    ArtifactCache,
    ArtifactError,
    artifacts_from_lock,
    mirrored,
    stage,
    wheel_platforms,
)
from imagebuild.errors import UserError
from imagebuild.safefile import atomic_file

UPSTREAM = "downloads.invalid"


class _Server:
    """A file server over `root` on 127.0.0.1 that counts requests and can drip bytes slowly."""

    def __init__(self, root: Path, delay: float = 0.0):
        self.root, self.delay, self.requests = root, delay, []
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(server.root), **kw)

            def log_message(self, *a):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                if not server.delay:
                    return super().do_GET()
                path = server.root / self.path.lstrip("/")
                data = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(0, len(data), 4096):
                    self.wfile.write(data[i : i + 4096])
                    self.wfile.flush()
                    time.sleep(server.delay)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "mirror"
    (root / UPSTREAM / "pkg").mkdir(parents=True)
    srv = _Server(root)
    yield root, srv
    srv.close()


def _publish(root: Path, name: str, data: bytes) -> tuple:
    path = root / UPSTREAM / "pkg" / name
    path.write_bytes(data)
    return f"https://{UPSTREAM}/pkg/{name}", hashlib.sha256(data).hexdigest()


def _lock(*artifacts) -> dict:
    return {
        "schema": "efa-image-build/lock/v1",
        "name": "t",
        "components": {"thing": {"artifacts": list(artifacts)}},
    }


def _no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.startswith(".tmp-")]


# ---------------------------------------------------------------- reading the lock


def test_lock_entries_in_variant_format_are_read():
    lock = _lock(
        {"kind": "url", "url": "https://h.invalid/a/x.tar.gz", "sha256": "a" * 64, "filename": "x.tar.gz"},
        {"kind": "git", "url": "https://h.invalid/o/repo.git", "commit": "b" * 40, "filename": "repo-b.tar"},
        {"kind": "pypi", "requirement": "nvidia-nccl-cu12==2.27.7", "sha256": "c" * 64, "filename": "n.whl"},
    )
    arts = artifacts_from_lock(lock)
    assert [a.kind for a in arts] == ["url", "git", "pypi"]
    assert arts[0].filename == "x.tar.gz" and arts[0].key == "url/" + "a" * 64
    assert arts[1].commit == "b" * 40 and arts[1].key == "git/" + "b" * 40
    assert arts[2].requirement == "nvidia-nccl-cu12==2.27.7"


@pytest.mark.parametrize(
    "entry, key",
    [
        ({"kind": "url", "url": "http://h.invalid/x", "sha256": "a" * 64}, "url"),
        ({"kind": "url", "url": "https://h.invalid/x"}, "sha256"),
        ({"kind": "git", "url": "https://h.invalid/r", "commit": "v1.2.3"}, "commit"),
        ({"kind": "pypi", "requirement": "torch", "sha256": "a" * 64}, "requirement"),
        (
            {"kind": "url", "url": "https://h.invalid/x", "sha256": "a" * 64, "filename": "../etc/passwd"},
            "file",
        ),
        ({"kind": "ftp", "url": "ftp://h.invalid/x"}, "kind"),
    ],
)
def test_bad_lock_entries_name_the_key(entry, key):
    with pytest.raises(UserError) as err:
        artifacts_from_lock(_lock(entry), "build/v/variant.lock.json")
    assert err.value.key == f"components.thing.artifacts[0].{key}"
    assert err.value.file == "build/v/variant.lock.json"


def test_mirror_keeps_the_upstream_host_in_the_path(tmp_path):
    assert mirrored("https://a.invalid/x/y.tgz", None) == "https://a.invalid/x/y.tgz"
    assert mirrored("https://a.invalid/x/y.tgz", "http://m:8/base/") == "http://m:8/base/a.invalid/x/y.tgz"
    assert mirrored("https://a.invalid/r.git", str(tmp_path)) == f"{tmp_path.as_uri()}/a.invalid/r.git"


# ---------------------------------------------------------------- url artifacts


def test_url_artifact_is_fetched_once_verified_and_hardlinked(served, tmp_path):
    root, srv = served
    url, sha = _publish(root, "blob.bin", os.urandom(300_000))
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": sha}))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    ctx_a, ctx_b = tmp_path / "a" / "context", tmp_path / "b" / "context"
    sums = stage(cache, [art], ctx_a)
    stage(cache, [art], ctx_b)  # a second variant needing the same file: no second download
    assert srv.requests == [f"/{UPSTREAM}/pkg/blob.bin"]
    assert sums == [("blob.bin", sha)]
    cached = cache.cached(art)
    assert os.path.samefile(cached, ctx_a / "artifacts" / "blob.bin")
    assert (ctx_b / "artifacts" / "SHA256SUMS").read_text() == f"{sha}  blob.bin\n"
    assert _no_temp_files(tmp_path / "cache")


def test_checksum_mismatch_fails_and_leaves_nothing_cached(served, tmp_path):
    root, srv = served
    url, _ = _publish(root, "blob.bin", b"what the server really has")
    wrong = hashlib.sha256(b"what the lock pinned").hexdigest()
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": wrong}))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    with pytest.raises(ArtifactError, match="checksum mismatch for blob.bin"):
        cache.ensure(art)
    assert cache.cached(art) is None
    assert not list((tmp_path / "cache").rglob("blob.bin"))
    assert _no_temp_files(tmp_path / "cache")


def test_a_tampered_cache_file_is_not_used(served, tmp_path):
    root, srv = served
    url, sha = _publish(root, "blob.bin", os.urandom(10_000))
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": sha}))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    path = cache.ensure(art)
    with open(path, "r+b") as f:
        f.write(b"evil")
    assert cache.cached(art) is None  # re-hashed because size/mtime changed, and the hash is wrong
    assert sha256_of(cache.ensure(art)) == sha  # refetched
    assert len(srv.requests) == 2


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_offline_names_what_is_missing(served, tmp_path):
    root, _srv = served
    url, sha = _publish(root, "blob.bin", b"x")
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": sha}))
    cache = ArtifactCache(tmp_path / "cache", offline=True, say=lambda _l: None)
    assert cache.missing([art]) == [art]
    with pytest.raises(UserError, match="blob.bin") as err:
        cache.ensure(art)
    assert err.value.key == "--offline"


_FETCH_SCRIPT = """
import sys
from pathlib import Path
from imagebuild.building.artifacts import ArtifactCache, artifacts_from_lock
lock = {"components": {"c": {"artifacts": [{"url": sys.argv[1], "sha256": sys.argv[2]}]}}}
(art,) = artifacts_from_lock(lock)
if len(sys.argv) > 5:
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full disk: writes fail with an OSError instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[5]), int(sys.argv[5])))
try:
    ArtifactCache(Path(sys.argv[3]), mirror=sys.argv[4], say=print).ensure(art)
except Exception as err:
    print("ERROR", type(err).__name__, err)
    sys.exit(3)
"""


def test_a_killed_download_leaves_the_cache_consistent(tmp_path):
    root = tmp_path / "mirror"
    (root / UPSTREAM / "pkg").mkdir(parents=True)
    url, sha = _publish(root, "big.bin", os.urandom(400_000))
    srv = _Server(root, delay=0.01)  # ~4 s for the whole file: plenty of time to kill it halfway
    try:
        cache_dir = tmp_path / "cache"
        proc = subprocess.Popen(
            [sys.executable, "-c", _FETCH_SCRIPT, url, sha, str(cache_dir), srv.url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(cache_dir.rglob(".tmp-big.bin*")):
            time.sleep(0.05)
        partial = list(cache_dir.rglob(".tmp-big.bin*"))
        assert partial, "the download never started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        srv.close()
    (art,) = artifacts_from_lock(_lock({"url": url, "sha256": sha}))
    cache = ArtifactCache(cache_dir, say=lambda _l: None)
    assert cache.cached(art) is None  # the partial file is never taken for the artifact
    assert not list(cache_dir.rglob("big.bin"))
    srv2 = _Server(root)
    try:
        cache.mirror = srv2.url
        assert sha256_of(cache.ensure(art)) == sha
    finally:
        srv2.close()


def test_a_write_failure_disk_full_leaves_no_file(served, tmp_path):
    root, srv = served
    url, sha = _publish(root, "big.bin", os.urandom(2_000_000))
    cache_dir = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-c", _FETCH_SCRIPT, url, sha, str(cache_dir), srv.url, "500000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ERROR ArtifactError" in proc.stdout and "File too large" in proc.stdout
    assert not list(cache_dir.rglob("big.bin")) and _no_temp_files(cache_dir)


def _full_disk_after(limit: int):
    """A shutil.copyfile that writes `limit` bytes of the file, then fails as a full disk does."""

    def copyfile(src, dst, *, follow_symlinks=True):
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            fout.write(fin.read(limit))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    return copyfile


def test_disk_full_while_staging_a_copy_leaves_no_partial_file(served, tmp_path, monkeypatch):
    """The cache and the context on two filesystems: staging copies; a full disk half way through is an
    ArtifactError naming the file, and neither the file nor its temporary name is left (issue 23, item 7)."""
    root, srv = served
    url, sha = _publish(root, "torch-0-py3-none-any.whl", os.urandom(300_000))
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": sha}))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    cache.ensure(art)

    def no_link(src, dst, **kw):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(dst))

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(shutil, "copyfile", _full_disk_after(100_000))
    ctx = tmp_path / "ctx"
    with pytest.raises(ArtifactError) as err:
        stage(cache, [art], ctx)
    assert "torch-0-py3-none-any.whl" in str(err.value) and "No space left on device" in str(err.value)
    assert sorted(p.name for p in (ctx / "artifacts").iterdir()) == []
    assert cache.cached(art) is not None and _no_temp_files(tmp_path / "cache")


def test_disk_full_while_writing_sha256sums_leaves_no_partial_file(served, tmp_path, monkeypatch):
    root, srv = served
    url, sha = _publish(root, "blob.bin", b"x" * 1000)
    (art,) = artifacts_from_lock(_lock({"kind": "url", "url": url, "sha256": sha}))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    real_write_text = Path.write_text

    def write_half(self, text, *a, **kw):
        if self.name.startswith(".tmp-SHA256SUMS"):
            real_write_text(self, text[: len(text) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, text, *a, **kw)

    monkeypatch.setattr(Path, "write_text", write_half)
    with pytest.raises(ArtifactError) as err:
        stage(cache, [art], tmp_path / "ctx")
    assert "SHA256SUMS" in str(err.value) and "No space left on device" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "ctx" / "artifacts").iterdir()) == ["blob.bin"]


def test_atomic_file_removes_its_temporary_file_on_any_exception_and_keeps_the_old_file(tmp_path):
    final = tmp_path / "f.txt"
    final.write_text("old\n")
    for exc in (OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with atomic_file(final) as tmp:
                tmp.write_text("half")
                raise exc
        assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"] and final.read_text() == "old\n"
    with atomic_file(final) as tmp:
        tmp.write_text("new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"] and final.read_text() == "new\n"


# ---------------------------------------------------------------- git artifacts


def _git(*args, cwd):
    env = dict(os.environ, GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()


@pytest.fixture
def git_mirror(tmp_path):
    """A real repository at <mirror>/git.invalid/org/tool.git (the URL path, as a mirror lays it out)."""
    repo = tmp_path / "gitmirror" / "git.invalid" / "org" / "tool.git"
    repo.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "configure.ac").write_text("AC_INIT([tool], [1.0])\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "one", cwd=repo)
    first = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "NEWS").write_text("two\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "two", cwd=repo)
    second = _git("rev-parse", "HEAD", cwd=repo)
    return tmp_path / "gitmirror", first, second


def test_git_artifact_is_the_pinned_commit_as_a_deterministic_tar(git_mirror, tmp_path):
    mirror, first, _second = git_mirror
    entry = {"kind": "git", "url": "https://git.invalid/org/tool.git", "commit": first}
    (art,) = artifacts_from_lock(_lock(entry))
    a = ArtifactCache(tmp_path / "c1", mirror=str(mirror), say=lambda _l: None).ensure(art)
    b = ArtifactCache(tmp_path / "c2", mirror=str(mirror), say=lambda _l: None).ensure(art)
    assert a.name == f"tool-{first}.tar"
    assert sha256_of(a) == sha256_of(b)  # same bytes on every host: SHA256SUMS can pin it
    with tarfile.open(a) as tar:
        names = tar.getnames()
    assert f"tool-{first}/configure.ac" in names and f"tool-{first}/NEWS" not in names
    commit_id = subprocess.run(
        ["git", "get-tar-commit-id"], stdin=open(a, "rb"), capture_output=True, text=True
    )
    assert commit_id.stdout.strip() == first


def test_git_commit_not_in_the_repository_fails(git_mirror, tmp_path):
    mirror, _first, _second = git_mirror
    entry = {"kind": "git", "url": "https://git.invalid/org/tool.git", "commit": "0" * 40}
    (art,) = artifacts_from_lock(_lock(entry))
    cache = ArtifactCache(tmp_path / "c", mirror=str(mirror), say=lambda _l: None)
    with pytest.raises(ArtifactError):
        cache.ensure(art)
    assert cache.cached(art) is None and _no_temp_files(tmp_path / "c")


def test_a_read_only_mirror_without_its_empty_refs_folder_still_gives_the_pinned_commit(git_mirror, tmp_path):
    """A `git clone --mirror` whose refs are all packed has an empty refs/; a copy that drops empty folders
    is no repository to git. The cache reads it through a stand-in, verifies the commit, writes nothing
    there."""
    mirror, first, _second = git_mirror
    bare = tmp_path / "bare" / "git.invalid" / "org" / "tool.git"
    _git("clone", "-q", "--mirror", str(mirror / "git.invalid" / "org" / "tool.git"), str(bare), cwd=tmp_path)
    _git("pack-refs", "--all", cwd=bare)
    for leftover in sorted((bare / "refs").rglob("*"), reverse=True):
        leftover.rmdir()
    (bare / "refs").rmdir()
    subprocess.run(["chmod", "-R", "a-w", str(bare)], check=True)
    try:
        entry = {"kind": "git", "url": "https://git.invalid/org/tool.git", "commit": first}
        (art,) = artifacts_from_lock(_lock(entry))
        got = ArtifactCache(tmp_path / "c", mirror=str(tmp_path / "bare"), say=lambda _l: None).ensure(art)
        commit_id = subprocess.run(
            ["git", "get-tar-commit-id"], stdin=open(got, "rb"), capture_output=True, text=True
        )
        assert commit_id.stdout.strip() == first
        assert not (bare / "refs").exists()  # the mirror is as it was
        wrong = {"kind": "git", "url": "https://git.invalid/org/tool.git", "commit": "1" * 40}
        (bad,) = artifacts_from_lock(_lock(wrong))
        with pytest.raises(ArtifactError):
            ArtifactCache(tmp_path / "c2", mirror=str(tmp_path / "bare"), say=lambda _l: None).ensure(bad)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(bare)], check=True)


def test_every_pinned_source_commit_comes_from_the_shared_mirror(source_mirror, tmp_path):
    """CI builds aws-ofi-nccl, nccl-tests and GDRCopy from ../shared/mirror: every commit the catalog pins
    for them must come out of it, verified, as the build fetches it."""
    import yaml

    catalog = yaml.safe_load((ROOT / "imagebuild" / "catalog" / "components.yaml").read_text())
    cache = ArtifactCache(tmp_path / "c", mirror=str(source_mirror), say=lambda _l: None)
    fetched = []
    for name in ("aws_ofi_nccl", "nccl_tests", "gdrcopy"):
        for version, commit in sorted(catalog[name]["commits"].items()):
            entry = {"kind": "git", "url": catalog[name]["git"], "commit": commit}
            (art,) = artifacts_from_lock(_lock(entry))
            path = cache.ensure(art)
            commit_id = subprocess.run(
                ["git", "get-tar-commit-id"], stdin=open(path, "rb"), capture_output=True, text=True
            )
            assert commit_id.stdout.strip() == commit, (name, version)
            fetched.append(name)
    assert {"aws_ofi_nccl", "nccl_tests", "gdrcopy"} == set(fetched)


# ---------------------------------------------------------------- GPG


def _gpg(home: Path, *args, **kw):
    return subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), "--pinentry-mode", "loopback", "--passphrase", "", *args],
        check=True,
        capture_output=True,
        **kw,
    )


def _new_key(home: Path, uid: str) -> str:
    home.mkdir(mode=0o700, exist_ok=True)
    _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
    out = _gpg(home, "--with-colons", "--list-keys", uid, text=True).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def gpg_keys(tmp_path_factory):
    """Two signing keys, each in its own home. Making a key starts a gpg-agent there; it is ended after."""
    home = tmp_path_factory.mktemp("gnupg")
    try:
        good = _new_key(home / "good", "Release Signer <rel@t.invalid>")
        other = _new_key(home / "other", "Someone Else <else@t.invalid>")
        yield home, good, other
    finally:
        for name in ("good", "other"):
            if (home / name).is_dir():
                subprocess.run(["gpgconf", "--homedir", str(home / name), "--kill", "gpg-agent"], timeout=30)


def _signed(root: Path, home: Path, data: bytes, signer: str, keys_from: list):
    url, sha = _publish(root, "installer.tar.gz", data)
    sig = root / UPSTREAM / "pkg" / "installer.tar.gz.sig"
    _gpg(home / signer, "--detach-sign", "--output", str(sig), str(sig.with_suffix("")))
    key = root / UPSTREAM / "pkg" / "key.asc"
    key.write_bytes(b"".join(_gpg(home / k, "--armor", "--export").stdout for k in keys_from))
    return url, sha


def test_gpg_signature_by_the_pinned_key_passes(served, tmp_path, gpg_keys):
    root, srv = served
    home, good, _other = gpg_keys
    url, sha = _signed(root, home, os.urandom(5000), "good", ["good"])
    entry = {"url": url, "sha256": sha, "gpg_fingerprint": good, "key_url": f"https://{UPSTREAM}/pkg/key.asc"}
    entry["signature_file"] = "installer.tar.gz.sig"
    (art,) = artifacts_from_lock(_lock(entry))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    stage(cache, [art], tmp_path / "ctx")
    assert (tmp_path / "ctx" / "artifacts" / "installer.tar.gz.sig").is_file()
    record = json.loads((cache.cached(art).parent / "verified.json").read_text())
    assert record["gpg_fingerprint"] == good


def test_gpg_signature_by_another_key_in_the_same_key_file_fails(served, tmp_path, gpg_keys):
    """The key file carries both keys, signed by the unpinned one: only the pinned key may vouch."""
    root, srv = served
    home, good, _other = gpg_keys
    url, sha = _signed(root, home, os.urandom(5000), "other", ["good", "other"])
    entry = {"url": url, "sha256": sha, "gpg_fingerprint": good, "key_url": f"https://{UPSTREAM}/pkg/key.asc"}
    (art,) = artifacts_from_lock(_lock(entry))
    cache = ArtifactCache(tmp_path / "cache", mirror=srv.url, say=lambda _l: None)
    with pytest.raises(ArtifactError, match="GPG signature"):
        cache.ensure(art)
    assert cache.cached(art) is None and not list((tmp_path / "cache").rglob("installer.tar.gz"))


# ---------------------------------------------------------------- pypi


def _wheel(folder: Path, name: str, version: str, plat: str = "any") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-{plat}.whl"
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{dist}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-{plat}\n",
        )
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_pypi_wheel_is_downloaded_by_pip_and_checked(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "links", "efatinypkg", "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    good = {
        "requirement": "efatinypkg==1.0",
        "sha256": sha256_of(wheel),
        "filename": wheel.name,
        "kind": "pypi",
    }
    (art,) = artifacts_from_lock(_lock(good))
    cache = ArtifactCache(tmp_path / "cache", say=lambda _l: None)
    assert sha256_of(cache.ensure(art)) == sha256_of(wheel)
    bad = dict(good, sha256="0" * 64)
    (art_bad,) = artifacts_from_lock(_lock(bad))
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        cache.ensure(art_bad)
    assert cache.cached(art_bad) is None and _no_temp_files(tmp_path / "cache")


def test_the_pinned_wheel_of_another_architecture_is_downloaded(tmp_path, monkeypatch):
    """An arm64 twin pins the aarch64 wheel; on an x86_64 host pip must fetch that one (issue 25, item 5)."""
    plat = "manylinux2014_aarch64.manylinux_2_17_aarch64"
    arm = _wheel(tmp_path / "links", "efatinyplat", "1.0", plat)
    _wheel(tmp_path / "links", "efatinyplat", "1.0", "manylinux2014_x86_64.manylinux_2_17_x86_64")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    pin = {"requirement": "efatinyplat==1.0", "sha256": sha256_of(arm), "filename": arm.name, "kind": "pypi"}
    (art,) = artifacts_from_lock(_lock(pin))
    cache = ArtifactCache(tmp_path / "cache", say=lambda _l: None)
    assert sha256_of(cache.ensure(art)) == sha256_of(arm)
    assert wheel_platforms(arm.name) == ["manylinux2014_aarch64", "manylinux_2_17_aarch64"]
    assert wheel_platforms("efatinypkg-1.0-py3-none-any.whl") == []
