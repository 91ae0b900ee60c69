"""SBOM and signed provenance for every pushed digest (issue 25, item 4), against the real registry the tests
start (Debian's docker-registry: no referrers API, so the artifacts live under `sha256-<hex>.<kind>` tags).

`build.py push --sign-key` and `build.py attest` attach a CycloneDX SBOM and a DSSE-signed in-toto provenance
to the digest; `build.py verify` passes on it and fails, naming what, when the SBOM, the provenance or the
signature is another digest's; `build.py release --require-signed` refuses without a valid one. The keys are
made here, in the test, and never written outside its temporary folder.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from cli import build_py
from release_setup import fallback, make_keys, signing
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.registry import Credentials, RegistryAPI
from imagebuild.building.dlcbase import DEFAULT_NAME as DLC_LAYOUT
from imagebuild.release import attest

pytest_plugins = ["services_fixtures"]  # fixtures: registry, auth_registry, small_images


DPKG = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u10
Description: GNU C Library
 continuation: not a field

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: base-files
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u11
"""


def test_dpkg_status_lists_the_installed_packages_only():
    found = attest.parse_dpkg_status(DPKG)
    assert [(p.name, p.version, p.arch, p.source) for p in found] == [
        ("base-files", "12.4+deb12u11", "amd64", None),
        ("libc6", "2.36-9+deb12u10", "amd64", "glibc"),
    ]


def test_the_sbom_names_the_digest_and_lists_deb_python_and_the_locks_pins():
    lock = {"components": {"nccl": {"version": "2.27.7", "method": "url", "sha256": "ab" * 32, "params": {}}}}
    digest = "sha256:" + "1" * 64
    facts = attest.ImageFacts(
        name="127.0.0.1:5000/team/app",
        digest=digest,
        image_id="sha256:" + "2" * 64,
        labels={"org.efa-image-build.lock": json.dumps(lock)},
        deb=attest.parse_dpkg_status(DPKG),
        python={"/usr/bin/python3": {"numpy": "2.3.1"}, "/usr/local/bin/python3": {"numpy": "2.3.1"}},
    )
    doc = json.loads(attest.make_sbom(facts))
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["version"] == digest
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    libc = "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&upstream=glibc"
    assert by_ref["deb:libc6:amd64"]["purl"] == libc
    numpy = by_ref["pypi:numpy@2.3.1"]
    assert numpy["purl"] == "pkg:pypi/numpy@2.3.1" and [p["value"] for p in numpy["properties"]] == [
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ]
    nccl = by_ref["lock:nccl"]
    assert nccl["version"] == "2.27.7" and nccl["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    assert {"name": "efa-image-build:method", "value": "url"} in nccl["properties"]
    assert "gone" not in {c["name"] for c in doc["components"]}


def test_a_wrong_key_is_the_one_cause_verify_names(tmp_path):
    """Issue 42 item 4: with a key that did not sign the provenance, the SBOM cannot be matched to what the
    provenance names; verify said it was "not the SBOM the signed provenance names" as a second cause.
    With the right key, a swapped SBOM is still named."""
    digest = "sha256:" + "1" * 64
    facts = attest.ImageFacts(
        name="127.0.0.1:5000/team/app",
        digest=digest,
        image_id="sha256:" + "2" * 64,
        labels={},
        deb=attest.parse_dpkg_status(DPKG),
        python={},
    )
    build = attest.BuildFacts("v", ("matrix.yaml", "sha256:" + "3" * 64), None, {}, "buildx", None, "0")
    sbom = attest.make_sbom(facts)
    key, pub = make_keys(tmp_path, "team")
    _other, other_pub = make_keys(tmp_path, "other")
    envelope = attest.sign(attest.make_statement(facts, build, sbom), attest.load_signer(str(key)))
    sboms = [oci.Artifact("team/app:sha256-1.sbom", digest, sbom)]
    atts = [oci.Artifact("team/app:sha256-1.att", digest, envelope)]

    assert attest.check(digest, sboms, atts, attest.load_public_key(str(pub)), str(pub)) == []
    problems = attest.check(digest, sboms, atts, attest.load_public_key(str(other_pub)), str(other_pub))
    assert len(problems) == 1 and f"does not verify with the key {other_pub}" in problems[0], problems
    problems = attest.check(digest, sboms, [], attest.load_public_key(str(pub)), str(pub))
    assert problems == [f"no provenance attached to {digest}"]
    swapped = [oci.Artifact("team/app:sha256-1.sbom", digest, sbom + b" ")]
    problems = attest.check(digest, swapped, atts, attest.load_public_key(str(pub)), str(pub))
    assert any("is not the SBOM the signed provenance names" in p for p in problems), problems


@pytest.mark.docker
def test_verify_passes_on_a_pushed_image_and_fails_on_another_digests_sbom_provenance_or_signature(
    registry, small_images, tmp_path
):
    repo = f"attest-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    key, pub, matrix = signing(tmp_path)
    image_a, image_b = small_images["a"], small_images["b"]
    sum_a = write_summary(tmp_path / "a.json", [summary_entry("att", image_a, tags=[f"{repo}:content-a"])])
    sum_b = write_summary(tmp_path / "b.json", [summary_entry("att", image_b, tags=[f"{repo}:content-b"])])
    host = ["--registry", registry.host]

    # A: push --sign-key attests what it pushed; B: push, then attest
    res = build_py("push", "--summary", sum_a, *host, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err
    digest_a = json.loads(sum_a.read_text())["variants"][0]["digest"]
    assert f"attached\t{registry.host}/{repo}:{oci.fallback_tag(digest_a, 'sbom')}" in res.out
    assert build_py("push", "--summary", sum_b, *host).rc == 0
    digest_b = json.loads(sum_b.read_text())["variants"][0]["digest"]
    assert fallback(api, repo, digest_b, "att") is None
    res = build_py("attest", "--summary", sum_b, *host, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err

    image = f"{registry.host}/{repo}:content-a"
    res = build_py("verify", image, "--key", pub)
    assert res.rc == 0, res.err
    assert res.out == f"verified\t{image}\t{digest_a}\n"
    assert build_py("verify", f"{registry.host}/{repo}@{digest_b}", "--key", pub).rc == 0

    # what was attached: the SBOM lists the image's OS packages and the lock's pins; the signed statement
    # names the digest, the matrix, the lock and the SBOM by sha256
    (sbom,) = oci.fetch(api, repo, digest_a, "sbom", referrers=False)
    doc = json.loads(sbom.payload)
    names = {c["name"]: c for c in doc["components"]}
    assert doc["metadata"]["component"]["version"] == digest_a and "base-files" in names
    assert names["nccl"]["version"] == "2.26.2"  # image A's lock
    (att,) = oci.fetch(api, repo, digest_a, "att", referrers=False)
    envelope = json.loads(att.payload)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["subject"][0]["digest"] == {"sha256": digest_a[7:]}
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["matrix"]["digest"] == attest.digest_map(attest.sha256_bytes(matrix.read_bytes()))
    lock_text = image_a.labels["org.efa-image-build.lock"]
    assert deps["lock"]["digest"] == attest.digest_map(attest.sha256_bytes(lock_text.encode()))
    (byproduct,) = statement["predicate"]["runDetails"]["byproducts"]
    assert byproduct["digest"] == attest.digest_map(attest.sha256_bytes(sbom.payload))

    subject_a = api.manifest(repo, digest_a)
    originals = {k: fallback(api, repo, digest_a, k) for k in ("sbom", "att")}

    def restore():
        for kind, manifest in originals.items():
            api.put_manifest(repo, oci.fallback_tag(digest_a, kind), manifest)
        assert build_py("verify", image, "--key", pub).rc == 0

    # the SBOM swapped for B's (its artifact manifest copied as is under A's tag)
    api.put_manifest(repo, oci.fallback_tag(digest_a, "sbom"), fallback(api, repo, digest_b, "sbom"))
    res = build_py("verify", image, "--key", pub)
    assert res.rc == 1 and "Traceback" not in res.err, res.err
    assert f"is attached to {digest_b}, not {digest_a}" in res.err
    assert "is not the SBOM the signed provenance names" in res.err
    assert f"describes {digest_b}, not {digest_a}" in res.err
    restore()

    # the provenance swapped for B's, attached to A: its signature is good, its subject is not
    (att_b,) = oci.fetch(api, repo, digest_b, "att", referrers=False)
    oci.attach(api, repo, subject_a, "att", att_b.payload, referrers=False)
    res = build_py("verify", image, "--key", pub)
    assert res.rc == 1, res.err
    assert f"the signed statement names sha256:{digest_b[7:]}, not {digest_a}" in res.err
    assert "is not the SBOM the signed provenance names" in res.err
    restore()

    # A's statement with B's signature: the signature does not verify
    forged = dict(envelope, signatures=json.loads(att_b.payload)["signatures"])
    oci.attach(api, repo, subject_a, "att", json.dumps(forged).encode(), referrers=False)
    res = build_py("verify", image, "--key", pub)
    assert res.rc == 1 and f"does not verify with the key {pub}" in res.err, res.err
    restore()

    # another key: the signature does not verify either
    _other, other_pub = make_keys(tmp_path, "other")
    res = build_py("verify", image, "--key", other_pub)
    assert res.rc == 1 and f"signature of provenance {repo}:" in res.err, res.err


@pytest.mark.docker
def test_a_bad_key_file_is_exit_2_naming_it_and_nothing_is_attached(registry, small_images, tmp_path):
    repo = f"attest-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    summary = write_summary(
        tmp_path / "s.json", [summary_entry("att", small_images["a"], tags=[f"{repo}:content-a"])]
    )
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: []\n")
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    host = ["--registry", registry.host]

    res = build_py("push", "--summary", summary, *host, "--sign-key", not_a_key, "--matrix", matrix)
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"{not_a_key}: key '--sign-key': not an unencrypted PEM private key" in res.err
    assert api.manifest(repo, "content-a") is None  # refused before anything was pushed

    assert build_py("push", "--summary", summary, *host).rc == 0
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    missing = tmp_path / "missing.pem"
    res = build_py("attest", "--summary", summary, *host, "--sign-key", missing, "--matrix", matrix)
    assert res.rc == 2 and f"{missing}: key '--sign-key': cannot read signing key" in res.err, res.err
    assert fallback(api, repo, digest, "sbom") is None and fallback(api, repo, digest, "att") is None

    image = f"{registry.host}/{repo}:content-a"
    for bad, why in ((missing, "cannot read public key"), (not_a_key, "not a PEM public key")):
        res = build_py("verify", image, "--key", bad)
        assert res.rc == 2 and f"{bad}: key '--key': {why}" in res.err and "Traceback" not in res.err
        argv = ["release", "--summary", summary, "--registry", registry.host, "--tag", "r1"]
        res = build_py(*argv, "--require-signed", bad)
        assert res.rc == 2 and f"{bad}: key '--require-signed': {why}" in res.err, res.err
    # a good key but nothing attached: unknown never passes
    _key, pub = make_keys(tmp_path, "team")
    res = build_py("verify", image, "--key", pub)
    assert res.rc == 1 and f"no provenance attached to {digest}" in res.err, res.err
    assert f"no SBOM attached to {digest}" in res.err


@pytest.mark.docker
def test_release_require_signed_refuses_an_unsigned_digest_and_promotes_a_signed_one(
    registry, small_images, tmp_path
):
    repo = f"attest-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    key, pub, matrix = signing(tmp_path)
    _other, other_pub = make_keys(tmp_path, "other")
    image = small_images["a"]
    summary = write_summary(tmp_path / "s.json", [summary_entry("att", image, tags=[f"{repo}:content-a"])])
    checks = write_check_report(tmp_path / "checks.json", [("att", image.id, True)])
    host = ["--registry", registry.host]
    assert build_py("push", "--summary", summary, *host).rc == 0

    def release(pub_key):
        argv = ["release", "--summary", summary, "--checks", checks, "--records", tmp_path / "rec"]
        return build_py(*argv, *host, "--tag", "r1", "--require-signed", pub_key)

    res = release(pub)  # pushed, checked, but not signed
    assert res.rc == 1 and "release refused: not signed" in res.err and "no provenance attached" in res.err
    assert api.manifest(repo, "r1") is None

    assert build_py("attest", "--summary", summary, *host, "--sign-key", key, "--matrix", matrix).rc == 0
    res = release(other_pub)  # signed by a key the release does not trust
    assert res.rc == 1 and f"does not verify with the key {other_pub}" in res.err, res.err
    assert api.manifest(repo, "r1") is None

    res = release(pub)
    assert res.rc == 0, res.err
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    assert api.manifest(repo, "r1").digest == digest


@pytest.fixture(scope="module")
def dlc_layout(docker_client, local_base):
    """The DLC-layout base (python3 in /usr/local, pip-installed NCCL), a rebuild from the engine's cache."""
    assert build_py("base", "--layout", "dlc").rc == 0
    return docker_client.images.get(DLC_LAYOUT)


@pytest.mark.docker
def test_the_image_facts_are_read_in_a_container_of_the_image(docker_client, small_images, dlc_layout):
    digest = "sha256:" + "3" * 64
    facts = attest.read_facts(docker_client, "127.0.0.1:5000/team/app", digest, dlc_layout.id)
    # the DLC's own python in /usr/local (with NCCL's wheel) and Debian's beside it, each with its packages
    local = facts.python["/usr/local/bin/python3"]
    assert local["nvidia-nccl-cu12"] == "2.27.7" and "pip" in local and "/usr/bin/python3" in facts.python
    debs = {p.name: p for p in facts.deb}
    assert "libc6" in debs and debs["libc6"].version.startswith("2.36")
    # no interpreter (the lock names one it does not have, nor any usual place): no Python packages, said so
    small = attest.read_facts(docker_client, "127.0.0.1:5000/team/app", digest, small_images["a"].id)
    assert small.python == {} and "base-files" in {p.name for p in small.deb}
    doc = json.loads(attest.make_sbom(small))
    said = {"name": "efa-image-build:python", "value": "none: the image has no interpreter"}
    assert said in doc["metadata"]["properties"]


@pytest.mark.docker
def test_attest_and_verify_log_in_to_a_registry_with_auth_and_write_no_credential(
    auth_registry, small_images, tmp_path
):
    repo = f"attest-{uuid.uuid4().hex[:10]}/app"
    key, pub, matrix = signing(tmp_path)
    summary = write_summary(
        tmp_path / "s.json", [summary_entry("att", small_images["b"], tags=[f"{repo}:content-b"])]
    )
    login = ["--username", auth_registry.user, "--password-stdin"]
    secret = auth_registry.password + "\n"
    argv = ["push", "--summary", summary, "--registry", auth_registry.host, *login]
    res = build_py(*argv, "--sign-key", key, "--matrix", matrix, stdin=secret)
    assert res.rc == 0, res.err
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    image = f"{auth_registry.host}/{repo}@{digest}"
    assert build_py("verify", image, "--key", pub).rc == 2  # no login: refused by the registry, exit 2
    res = build_py("verify", image, "--key", pub, *login, stdin=secret)
    assert res.rc == 0, res.err
    api = RegistryAPI(auth_registry.host, Credentials(auth_registry.user, auth_registry.password))
    attached = [a.payload for k in ("sbom", "att") for a in oci.fetch(api, repo, digest, k, referrers=False)]
    assert len(attached) == 2
    for text in [*attached, res.out + res.err]:
        assert auth_registry.password not in (text if isinstance(text, str) else text.decode())
