"""A failed build says which step failed and what its command said last; `--build-ca` reaches builder stages.

Real builds on the local bases, no network beyond the build container's own loopback: apt and ls fail in two
variants built side by side (`--jobs 2`), each with a stage running beside the one that fails; pip fails on
a TLS server inside the builder stage whose certificate only the test's CA signs, then succeeds with
`--build-ca`, and no layer of the final image holds the CA.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import tarfile
import uuid
import zipfile
from pathlib import Path

import pytest
from cli import build_py
from conftest import LOCAL_BASE, import_or_fail, needed
from services import RUN
from throwaway import remove_images_tagged

from imagebuild.building import dlcbase, steplog

REPO = f"efa-image-build-test-{RUN}/failures"
DLC_LAYOUT = dlcbase.DEFAULT_NAME  # python3, pip and openssl (`build.py base --layout dlc`)


def _variant(out: Path, name: str, dockerfile: str) -> Path:
    """A rendered-variant folder with no artifacts: its Dockerfile, a lock, `context/`."""
    vdir = out / name
    (vdir / "context").mkdir(parents=True, exist_ok=True)
    (vdir / "Dockerfile").write_text(dockerfile)
    lock = {"schema": "efa-image-build/lock/v1", "name": name, "components": {}, "labels": {}}
    lock["tags"] = [f"{REPO}-{name}:latest"]
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    return vdir


def _build(out: Path, builder: str, *extra: str):
    argv = ["build", "--builder", builder, "--no-render", "--out", str(out), "--plain"]
    return build_py(*argv, "--cache", str(out.parent / "cache"), *extra)


def _summary(out: Path) -> dict:
    return {e["variant"]: e for e in json.loads((out / "summary.json").read_text())["variants"]}


@pytest.fixture(scope="module")
def cleanup_images(docker_client):
    yield
    remove_images_tagged(docker_client, REPO)


# ---------------------------------------------------------------- pure parts


def test_the_failed_vertex_names_itself_among_interleaved_stages():
    steps = steplog.BuildkitSteps()
    for line in (
        "#7 [builder 2/2] RUN pip install -r req.txt",
        "#7 sha256:05b94464a1ca16b8271d82fe3cf5957fe093c05b2434a904391cbc7b6048a8d6",
        "#8 [beside 2/3] RUN sleep 1",
        "#7 0.9 WARNING: Retrying after connection broken by 'SSLError(SSLCertVerificationError(1, "
        "'[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed'))'",
        "#8 DONE 1.0s",
        "#9 [beside 3/3] RUN sleep 8",
        "#7 1.2 ERROR: Could not find a version that satisfies the requirement x==1 (from versions: none)",
        "#9 1.3 still sleeping",
        "#7 1.2 ERROR: No matching distribution found for x==1",
        "#7 ERROR: executor failed running [/bin/sh -c pip install -r req.txt]: exit code: 1",
        "#9 CANCELED",
        "------",
        " > [builder 2/2] RUN pip install -r req.txt:",
        "------",
        "executor failed running [/bin/sh -c pip install -r req.txt]: exit code: 1",
    ):
        steps.feed(line)
    failure = steps.failure()
    assert failure.step == "[builder 2/2] RUN pip install -r req.txt" and failure.reason == "exit code: 1"
    assert failure.lines[-1] == "ERROR: No matching distribution found for x==1"
    assert "still sleeping" not in failure.lines and failure.tls
    text = steplog.describe(failure, "b/v/build.log")
    assert (
        text.splitlines()[0] == "[builder 2/2] RUN pip install -r req.txt: exit code: 1 (log b/v/build.log)"
    )
    assert "hint:" in text and "--build-ca PATH" in text
    assert "--build-ca" in steplog.describe(failure, "log", build_ca="/ca.crt")  # given, and still refused
    assert "hint" not in steplog.describe(steplog.Failure("[1/2] RUN false", "exit code: 1"), "log")


def test_classic_chunks_are_joined_into_lines_of_the_failing_step_only():
    steps = steplog.ClassicSteps()
    steps.start("Step 3/5 : RUN make")
    steps.feed("cc -c a.c\nerror: a.c:1: oops\n")
    steps.start("Step 4/5 : RUN apt-get install -y x\n")
    for chunk in ("Reading package lists...\n", "\x1b[91mE", ": Unable to locate package x\n\x1b[0m"):
        steps.feed(chunk)
    failure = steps.failure("The command '/bin/sh -c apt-get install -y x' returned a non-zero code: 100")
    assert failure.step == "Step 4/5 : RUN apt-get install -y x"
    assert failure.reason == "returned a non-zero code: 100"
    assert failure.lines == ["E: Unable to locate package x"]


def test_a_missing_build_ca_is_exit_2_naming_the_flag(tmp_path):
    for verb in ("build", "bake"):
        res = build_py(verb, "--no-render", "--out", tmp_path, "--build-ca", tmp_path / "no-such.crt")
        assert res.rc == 2 and "--build-ca" in res.err and "no-such.crt" in res.err, res.err
        assert "Traceback" not in res.err


def test_bake_carries_the_dockerfile_build_would_send_with_build_ca(tmp_path):
    from imagebuild.building import bake

    out = tmp_path / "out"
    _variant(out, "bk", _fails_beside("x", "true"))
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot a real one\n-----END CERTIFICATE-----\n")
    argv = ["bake", "--no-render", "--out", str(out), "--cache", str(tmp_path / "cache")]
    assert build_py(*argv).rc == 0
    target = json.loads((out / "docker-bake.json").read_text())["target"]["bk"]
    assert target["dockerfile"] == "../Dockerfile" and "dockerfile-inline" not in target
    assert build_py(*argv, "--build-ca", str(ca)).rc == 0
    doc = json.loads((out / "docker-bake.json").read_text())
    target = doc["target"]["bk"]
    assert "dockerfile" not in target and bake.validate(doc) == []
    sent = target["dockerfile-inline"].split("FROM ")
    assert [part.count("COPY certs/build-ca.crt ") for part in sent[1:]] == [1, 1, 0]  # beside, builder
    assert (out / "bk" / "context" / "certs" / "build-ca.crt").read_text() == ca.read_text()


# ---------------------------------------------------------------- real builds


def _fails_beside(tag: str, command: str) -> str:
    """A failing step in stage `builder` while stage `beside` starts a later step: BuildKit prints that
    step's line after the failing one began, so the step seen last is not the one that failed."""
    return (
        f"FROM {LOCAL_BASE} AS beside\n"
        f"RUN sleep 1 && echo {tag}\n"
        f"RUN sleep 4 && echo {tag}\n"
        f"FROM {LOCAL_BASE} AS builder\n"
        f"RUN echo {tag} && sleep 2 && {command}\n"
        f"FROM {LOCAL_BASE} AS runtime\n"
        "COPY --from=beside /etc/hostname /tmp/beside\n"
        "COPY --from=builder /etc/hostname /tmp/builder\n"
    )


@pytest.mark.docker
@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_each_variant_names_its_own_failing_step_and_error_lines_under_jobs(
    builder, docker_client, local_base, cleanup_images, tmp_path
):
    if builder == "buildkit":
        from imagebuild.building.buildkit import detect
        from imagebuild.errors import UserError

        try:
            detect("buildkit")
        except UserError as err:
            needed("a docker CLI that runs BuildKit builds", str(err))
    tag = uuid.uuid4().hex[:12]
    out = tmp_path / "out"
    pkg, missing = f"nosuchpkg-{tag}-a", f"/no/such/dir-{tag}-b"
    _variant(out, "apt-fails", _fails_beside(tag, f"apt-get install -y {pkg}"))
    _variant(out, "ls-fails", _fails_beside(tag, f"ls {missing}"))
    res = _build(out, builder, "--jobs", "2")
    assert res.rc == 1, res.out + res.err
    s = _summary(out)
    apt, ls = s["apt-fails"]["error"], s["ls-fails"]["error"]
    assert s["apt-fails"]["status"] == s["ls-fails"]["status"] == "failed"
    # the first line: the variant's own failing step (not `sleep 4` beside it, not the other variant's)
    for error, command in ((apt, f"apt-get install -y {pkg}"), (ls, f"ls {missing}")):
        first = error.splitlines()[0]
        assert f"sleep 2 && {command}:" in first and "sleep 4" not in first and "sleep 1" not in first
        assert first.startswith("[builder 2/2] RUN " if builder == "buildkit" else "Step "), first
    # then what the command itself said last: apt's and ls's own words, each in its own variant only
    assert f"    E: Unable to locate package {pkg}" in apt.splitlines()
    assert any(f"cannot access '{missing}': No such file or directory" in line for line in ls.splitlines())
    assert missing not in apt and pkg not in ls and "hint" not in apt + ls
    for name, error in (("apt-fails", apt), ("ls-fails", ls)):  # printed as in the summary
        first, *rest = error.splitlines()
        assert f"FAILED {name}: {first}" in res.out and all(line in res.out for line in rest)


def _tls_files(root: Path):
    """A CA, a server certificate for localhost it signed, and a one-wheel index served over TLS by
    serve.py (bound to port 0; the port is written to `ready`). Returns the CA's PEM."""
    import_or_fail("cryptography", "pip install cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, sign_key, ca: bool):
        b = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
        b = b.serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        b = b.not_valid_after(now + datetime.timedelta(days=1))
        b = b.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        return b.sign(sign_key, hashes.SHA256())

    ca_key, srv_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "efa-image-build test CA")])
    srv_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    ca_pem = cert(ca_name, ca_name, ca_key, ca_key, True).public_bytes(serialization.Encoding.PEM)
    www = root / "www"
    (www / "simple" / "probe").mkdir(parents=True)
    (root / "server.crt").write_bytes(
        cert(srv_name, ca_name, srv_key, ca_key, False).public_bytes(serialization.Encoding.PEM)
    )
    (root / "server.key").write_bytes(
        srv_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    wheel = "probe-1.0-py3-none-any.whl"
    files = {
        "probe/__init__.py": b"",
        "probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe\nVersion: 1.0\n",
        "probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(www / wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        record = [*files, "probe-1.0.dist-info/RECORD"]
        z.writestr("probe-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in record))
    sha = hashlib.sha256((www / wheel).read_bytes()).hexdigest()
    (www / "simple" / "probe" / "index.html").write_text(
        f'<a href="../../{wheel}#sha256={sha}">{wheel}</a>\n'
    )
    (root / "serve.py").write_text(
        "import functools, http.server, ssl, sys\n"
        "handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1] + '/www')\n"
        "srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)\n"
        "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
        "ctx.load_cert_chain(sys.argv[1] + '/server.crt', sys.argv[1] + '/server.key')\n"
        "srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n"
        "open(sys.argv[1] + '/ready', 'w').write(str(srv.server_address[1]))\n"
        "srv.serve_forever()\n"
    )
    return ca_pem


@pytest.fixture(scope="module")
def dlc_layout(docker_client):
    import docker

    try:
        docker_client.images.get(DLC_LAYOUT)
    except docker.errors.ImageNotFound:
        needed(f"base image {DLC_LAYOUT}", "build.py base --layout dlc (make base)")
    return DLC_LAYOUT


def _layer_files(docker_client, image_id: str):
    """(path, bytes) of every file in every layer of the image, from `docker save`."""
    saved = io.BytesIO(b"".join(docker_client.images.get(image_id).save(named=False)))
    with tarfile.open(fileobj=saved) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                for member in inner:
                    if member.isfile():
                        yield member.name, inner.extractfile(member).read()


@pytest.mark.docker
@pytest.mark.parametrize("builder", ["auto", "classic"])
def test_pip_behind_an_untrusted_tls_server_hints_build_ca_which_then_works_and_stays_out(
    builder, docker_client, local_base, dlc_layout, cleanup_images, tmp_path
):
    out = tmp_path / "out"
    vdir = _variant(
        out,
        "tls",
        f"FROM {dlc_layout} AS builder\n"
        "COPY tls /tmp/tls\n"
        "RUN (python3 /tmp/tls/serve.py /tmp/tls &) \\\n"
        " && for i in $(seq 100); do [ -s /tmp/tls/ready ] && break; sleep 0.1; done \\\n"
        " && pip download --no-deps --retries 0 --timeout 20 --disable-pip-version-check -d /tmp/dl \\\n"
        '      --index-url "https://localhost:$(cat /tmp/tls/ready)/simple/" probe==1.0\n'
        f"FROM {LOCAL_BASE} AS runtime\n"
        "COPY --from=builder /tmp/dl /opt/dl\n",
    )
    ca_pem = _tls_files(vdir / "context" / "tls")
    ca = tmp_path / "proxy-ca.crt"
    ca.write_bytes(ca_pem)

    res = _build(out, builder)  # the CA is in the matrix of nobody: pip cannot verify the server
    assert res.rc == 1, res.out + res.err
    error = _summary(out)["tls"]["error"]
    first, lines = error.splitlines()[0], error.splitlines()[1:]
    assert "pip download" in first and first.startswith(("[builder ", "Step 3/")), first
    assert "    ERROR: No matching distribution found for probe==1.0" in lines
    assert "CERTIFICATE_VERIFY_FAILED" in Path(_summary(out)["tls"]["log"]).read_text()
    assert any("hint:" in line and "--build-ca PATH" in line for line in lines)

    res = _build(out, builder, "--build-ca", str(ca))
    entry = _summary(out)["tls"]
    assert res.rc == 0 and entry["status"] == "built", entry["error"]
    log = Path(entry["log"]).read_text()
    assert (
        f"build CA: {ca} -> context/certs/build-ca.crt (builder stages builder; never the final image)" in log
    )
    assert (vdir / "Dockerfile").read_text().count("build-ca") == 0  # the rendered file, the hashed one
    files = dict(_layer_files(docker_client, entry["image_id"]))
    assert any(name.endswith("opt/dl/probe-1.0-py3-none-any.whl") for name in files)  # pip got through
    body = ca_pem.splitlines()[1]  # the CA's first line of base64, as a bundle would hold it too
    assert not [n for n, data in files.items() if "build-ca" in n or body in data]
