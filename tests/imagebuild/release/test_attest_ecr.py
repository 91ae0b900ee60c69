"""SBOM and signed provenance on Amazon ECR (issue 30): `push --ecr --sign-key`, `attest --ecr`,
`verify --ecr` and `release --ecr --require-signed`.

ECR's API (repositories, the login token, BatchGetImage, PutImage) is moto's server; ECR's registry endpoint
is a real registry (Debian's docker-registry, fixture `ecr_token_registry`) whose only login is user AWS with
moto's ECR token as password, so every registry call below succeeds only with the token the tool got from
ECR's API. One substitution: moto hands out a registry host that does not exist, so this process's
`imagebuild.adapters.ecr.registry_host` is replaced (monkeypatch) by one answering the stand-in's host; the
rest is the tool's own path (the docker engine pushes there with the token, the attestations are written and
read through the v2 API logged in with it). The stand-in has no referrers API, so the artifacts go under the
fallback tags `sha256-<hex>.<kind>`: the path ECR's immutable tags constrain (written once, never moved).
ECR's API and its registry are one store; here they are two: before the promotion step of release (ECR's
PutImage, moto), moto is given the manifest bytes the registry holds, as ECR would hold them after the push.
"""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py
from services import RUN, summary_entry, write_check_report, write_summary
from test_attest import make_keys

from imagebuild.adapters import ecr
from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.aws import aws_client
from imagebuild.adapters.registry import Credentials, ImageRef, RegistryAPI
from imagebuild.release.destinations import Registries, RegistryTarget
from imagebuild.retry import RetryPolicy

pytest_plugins = ["services_fixtures"]  # fixtures: aws, ecr_token_registry, small_images

FAST = RetryPolicy(attempts=3, base=0.05, cap=0.2)


def test_the_ecr_registry_is_logged_in_to_with_the_token_over_https(aws):
    """The v2 API of the ECR host: ECR's token (user AWS), https (the host is no loopback), whatever
    --plain-http says; its tags are fixed. Another host is logged in to as before (no ECR token there)."""
    target = RegistryTarget(ecr=True, plain_http=True, region="us-east-1", endpoint_url=aws.endpoint_url)
    registries = Registries(target, FAST)
    client = aws_client("ecr", "us-east-1", aws.endpoint_url)
    host = ecr.registry_host(client, FAST)
    api = registries.api(host)
    assert api.base == f"https://{host}"
    assert api.creds is not None and api.creds.username == "AWS"
    assert api.creds.password == ecr.login(client, FAST).password
    assert api.creds.password not in repr(api.creds)
    assert registries.fixed_tags(host) and not registries.fixed_tags("other.example:5000")
    other = registries.api("other.example:5000")
    assert other.creds is None or other.creds.username != "AWS"


def _fallback(api, repo, digest, kind):
    return api.manifest(repo, oci.fallback_tag(digest, kind))


@pytest.mark.docker
def test_attest_verify_and_require_signed_on_ecr(
    aws, ecr_token_registry, small_images, tmp_path, monkeypatch
):
    """The stand-in for ECR's registry host is the only substitution (see the module docstring)."""
    stand_in = ecr_token_registry
    monkeypatch.setattr("imagebuild.adapters.ecr.registry_host", lambda _client, _policy=None: stand_in.host)
    repo = f"h6-ecr-attest-{RUN}-{uuid.uuid4().hex[:8]}/app"
    to_ecr = ["--ecr", "--region", "us-east-1", "--endpoint-url", aws.endpoint_url]
    key, pub = make_keys(tmp_path, "team")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: []\n")
    image_a, image_b = small_images["a"], small_images["b"]
    sum_a = write_summary(tmp_path / "a.json", [summary_entry("ecr-a", image_a, tags=[f"{repo}:content-a"])])
    sum_b = write_summary(tmp_path / "b.json", [summary_entry("ecr-b", image_b, tags=[f"{repo}:content-b"])])
    checks = write_check_report(
        tmp_path / "checks.json", [("ecr-a", image_a.id, True), ("ecr-b", image_b.id, True)]
    )
    api = RegistryAPI(stand_in.host, Credentials(stand_in.user, stand_in.password))  # the test's own reader
    client = aws_client("ecr", "us-east-1", aws.endpoint_url)
    said = []

    def run(*argv):
        res = build_py(*argv)
        said.append(res.out + res.err)
        return res

    def release(summary, tag):
        argv = ["release", "--summary", summary, "--checks", checks, "--records", tmp_path / "rec", *to_ecr]
        return run(*argv, "--tag", tag, "--require-signed", pub)

    def released(tag):
        return ecr.existing_image(client, FAST)(ImageRef(stand_in.host, repo, tag))

    def given_to_moto(digest, tag):  # ECR's API sees what its registry holds (one store there, two here)
        ecr.put_tag(client, ImageRef(stand_in.host, repo, tag), api.manifest(repo, digest), FAST)

    # A: push --ecr --sign-key pushes with ECR's token and attaches the SBOM and the provenance
    res = run("push", "--summary", sum_a, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err
    digest_a = json.loads(sum_a.read_text())["variants"][0]["digest"]
    for kind in ("sbom", "att"):
        assert f"attached\t{stand_in.host}/{repo}:{oci.fallback_tag(digest_a, kind)}" in res.out
    image_a_ref = f"{stand_in.host}/{repo}:content-a"
    res = run("verify", image_a_ref, "--key", pub, *to_ecr)
    assert res.rc == 0, res.err
    assert res.out == f"verified\t{image_a_ref}\t{digest_a}\n"
    assert run("verify", image_a_ref, "--key", pub).rc == 2  # without --ecr: no login, the registry refuses

    # B: pushed, not signed: verify fails, release refuses it (exit 1), nothing promoted
    assert run("push", "--summary", sum_b, *to_ecr).rc == 0
    digest_b = json.loads(sum_b.read_text())["variants"][0]["digest"]
    image_b_ref = f"{stand_in.host}/{repo}@{digest_b}"
    res = run("verify", image_b_ref, "--key", pub, *to_ecr)
    assert res.rc == 1 and f"no provenance attached to {digest_b}" in res.err, res.err
    given_to_moto(digest_b, "content-b")
    res = release(sum_b, "r-b")
    assert res.rc == 1 and "release refused: not signed" in res.err, res.err
    assert released("r-b") is None

    # attest --ecr signs it: verify passes, the release gate passes and ECR's PutImage promotes it
    res = run("attest", "--summary", sum_b, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err
    assert all(_fallback(api, repo, digest_b, kind) is not None for kind in ("sbom", "att"))
    assert run("verify", image_b_ref, "--key", pub, *to_ecr).rc == 0
    res = release(sum_b, "r-b")
    assert res.rc == 0, res.err
    assert released("r-b").digest == digest_b

    # A tampered (its SBOM tag holds B's SBOM): verify fails, naming it, and release refuses A
    api.put_manifest(repo, oci.fallback_tag(digest_a, "sbom"), _fallback(api, repo, digest_b, "sbom"))
    res = run("verify", image_a_ref, "--key", pub, *to_ecr)
    assert res.rc == 1 and f"is attached to {digest_b}, not {digest_a}" in res.err, res.err
    given_to_moto(digest_a, "content-a")
    res = release(sum_a, "r-a")
    assert res.rc == 1 and "release refused: not signed" in res.err, res.err
    assert released("r-a") is None

    # ECR's tags are immutable: attest never moves one. Again on B: the same artifacts, nothing written; on
    # tampered A: refused (exit 1), the tag left holding what it held
    before = {k: _fallback(api, repo, digest_b, k).digest for k in ("sbom", "att")}
    res = run("attest", "--summary", sum_b, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err
    assert {k: _fallback(api, repo, digest_b, k).digest for k in ("sbom", "att")} == before
    held = _fallback(api, repo, digest_a, "sbom").digest
    res = run("attest", "--summary", sum_a, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 1 and "immutable" in res.err and "not moved" in res.err, res.err
    assert _fallback(api, repo, digest_a, "sbom").digest == held

    for text in said:  # the token is never printed
        assert stand_in.password not in text
