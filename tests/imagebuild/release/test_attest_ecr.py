"""SBOM and signed provenance on Amazon ECR (issue 30): `push --ecr --sign-key`, `attest --ecr`,
`verify --ecr` and `release --ecr --require-signed`.

ECR's API (repositories, the login token, BatchGetImage, PutImage) is moto's server; ECR's registry endpoint
is a real registry (Debian's docker-registry, fixture `ecr_stand_in`) whose only login is user AWS with
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
import re
import shlex
import uuid

import pytest
from cli import build_py
from release_setup import fallback, signing
from services import RUN, summary_entry, write_check_report, write_summary

from imagebuild.adapters import ecr
from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.aws import aws_client
from imagebuild.adapters.registry import ImageRef
from imagebuild.release.destinations import Destination, Registries, RegistryTarget
from imagebuild.retry import RetryPolicy

pytest_plugins = ["services_fixtures"]  # fixtures: aws, ecr_stand_in, small_images

FAST = RetryPolicy(attempts=3, base=0.05, cap=0.2)


def test_the_ecr_registry_is_logged_in_to_with_the_token_over_https(aws):
    """The v2 API of the ECR host: ECR's token (user AWS), https (the host is no loopback), whatever
    --plain-http says; its tags are fixed. Another host is logged in to as before (no ECR token there).
    Push's destination reaches the same host with the same login."""
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
    dest = Destination(target, FAST)  # push's way there (twins' index, fan-in): the same login, one function
    assert (dest.host, dest.oci_api().base, dest.oci_api().creds) == (host, api.base, api.creds)


@pytest.mark.docker
def test_attest_verify_and_require_signed_on_ecr(aws, ecr_stand_in, small_images, tmp_path):
    """The stand-in for ECR's registry host is the only substitution (see the module docstring)."""
    stand_in, to_ecr, api = ecr_stand_in.registry, ecr_stand_in.to_ecr, ecr_stand_in.api  # api: our reader
    repo = f"h6-ecr-attest-{RUN}-{uuid.uuid4().hex[:8]}/app"
    key, pub, matrix = signing(tmp_path)
    image_a, image_b = small_images["a"], small_images["b"]
    sum_a = write_summary(tmp_path / "a.json", [summary_entry("ecr-a", image_a, tags=[f"{repo}:content-a"])])
    sum_b = write_summary(tmp_path / "b.json", [summary_entry("ecr-b", image_b, tags=[f"{repo}:content-b"])])
    checks = write_check_report(
        tmp_path / "checks.json", [("ecr-a", image_a.id, True), ("ecr-b", image_b.id, True)]
    )
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
    assert all(fallback(api, repo, digest_b, kind) is not None for kind in ("sbom", "att"))
    assert run("verify", image_b_ref, "--key", pub, *to_ecr).rc == 0
    res = release(sum_b, "r-b")
    assert res.rc == 0, res.err
    assert released("r-b").digest == digest_b

    # A tampered (its SBOM tag holds B's SBOM): verify fails, naming it, and release refuses A
    api.put_manifest(repo, oci.fallback_tag(digest_a, "sbom"), fallback(api, repo, digest_b, "sbom"))
    res = run("verify", image_a_ref, "--key", pub, *to_ecr)
    assert res.rc == 1 and f"is attached to {digest_b}, not {digest_a}" in res.err, res.err
    given_to_moto(digest_a, "content-a")
    res = release(sum_a, "r-a")
    assert res.rc == 1 and "release refused: not signed" in res.err, res.err
    assert released("r-a") is None

    # ECR's tags are immutable: attest never moves one. Again on B: the same artifacts, nothing written; on
    # tampered A: refused (exit 1), the tag left holding what it held
    before = {k: fallback(api, repo, digest_b, k).digest for k in ("sbom", "att")}
    res = run("attest", "--summary", sum_b, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 0, res.err
    assert {k: fallback(api, repo, digest_b, k).digest for k in ("sbom", "att")} == before
    held = fallback(api, repo, digest_a, "sbom").digest
    res = run("attest", "--summary", sum_a, *to_ecr, "--sign-key", key, "--matrix", matrix)
    assert res.rc == 1 and "immutable" in res.err and "not moved" in res.err, res.err
    assert fallback(api, repo, digest_a, "sbom").digest == held

    for text in said:  # the token is never printed
        assert stand_in.password not in text


def _ecr_flags(run: str, scalars: dict) -> list:
    """The destination flags a CI step gives on its ECR branch (IMAGE_REGISTRY empty), as it writes them."""
    found = re.search(r"else dest=\(([^)]*)\); fi", run) or re.search(r"else\s+set -- (--ecr[^\n#]*)", run)
    assert found, f"no ECR branch in: {run}"
    return shlex.split(_fill(found.group(1), scalars))


def _fill(text: str, scalars: dict) -> str:
    """Shell variables (`$X`, `${X}`) and GitHub's `${{ matrix.variant }}` filled from `scalars`."""
    text = text.replace("${{ matrix.variant }}", scalars["VARIANT"])
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z_0-9]*)\}?", lambda m: scalars[m.group(1)], text)


def _tool_argv(line: str, scalars: dict, arrays: dict) -> list:
    """One `efa-image-build ...` line of an example as argv, its arrays (`"${dest[@]}"`, `"$@"`, `$args`)
    spliced in."""
    for ref, name in (
        ('"${dest[@]}"', "dest"),
        ('"$@"', "dest"),
        ('"${args[@]}"', "args"),
        ("$args", "args"),
    ):
        line = line.replace(ref, f" @{name}@ ")
    argv = []
    for token in shlex.split(_fill(line, scalars)):
        argv += arrays[token.strip("@")] if re.fullmatch(r"@\w+@", token) else [token]
    return argv


def _example_steps(name: str, text: str):
    """(verb, the text of the CI step that runs it) for push, attest and release, in the example's order."""
    import yaml

    doc = yaml.safe_load(text)
    if name == "github-actions.yml":
        runs = [s.get("run", "") for job in ("build", "release") for s in doc["jobs"][job]["steps"]]
    else:
        runs = doc["phases"]["build"]["commands"]  # one script: its `set --` holds the destination
    steps = []
    for run in runs:
        joined = re.sub(r"\\\n\s*", " ", run)
        for verb, rest in re.findall(r"efa-image-build (push|attest|release) ([^\n]*)", joined):
            steps.append((verb, f"{verb} {rest}", run))
    return steps


@pytest.mark.docker
@pytest.mark.parametrize("name", ["github-actions.yml", "buildspec.yml"])
def test_the_ci_examples_main_path_on_ecr_attests_and_releases_signed(
    name, aws, ecr_stand_in, small_images, tmp_path, monkeypatch
):
    """Each example's push, attest and release lines, as written on its ECR branch (IMAGE_REGISTRY empty),
    run in this process in order (the registry host stand-in needs this process: see the module docstring):
    the release promotes the digest only after `--require-signed` verified it. Run as a whole, in a shell, on
    the IMAGE_REGISTRY branch: tests/imagebuild/test_ci_examples_run.py."""
    from paths import ROOT

    stand_in, api = ecr_stand_in.registry, ecr_stand_in.api
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint_url)  # the examples give no --endpoint-url
    monkeypatch.chdir(tmp_path)
    variant, sha = f"ci-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    repo = f"h6-ecr-ci-{RUN}-{uuid.uuid4().hex[:8]}/app"
    image = small_images["a"]
    (tmp_path / "build").mkdir()
    write_summary(tmp_path / "build/summary.json", [summary_entry(variant, image, tags=[f"{repo}:content"])])
    write_check_report(tmp_path / "build/test-report.json", [(variant, image.id, True)])
    key, pub, _matrix = signing(tmp_path)  # the matrix the examples name: ./matrix.yaml
    (tmp_path / "signing.pub.pem").write_bytes(pub.read_bytes())  # where CodeBuild's release writes it
    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    (runner_temp / "signing.pub.pem").write_bytes(pub.read_bytes())  # where GitHub's release writes it
    import boto3

    boto3.client("s3", region_name="us-east-1", endpoint_url=aws.endpoint_url).create_bucket(Bucket="h6-rel")
    scalars = {
        "VARIANT": variant, "WHICH": f"--variant {variant}", "key": str(key), "AWS_REGION": "us-east-1",
        "RUNNER_TEMP": str(runner_temp), "tag": "{variant}-" + sha, "RELEASE_S3": "s3://h6-rel/records",
        "CODEBUILD_RESOLVED_SOURCE_VERSION": sha,
    }  # fmt: skip
    checks = ["--summary", "build/summary.json", "--checks", "build/test-report.json"]
    client = aws_client("ecr", "us-east-1", aws.endpoint_url)

    steps = _example_steps(name, (ROOT / "examples" / "ci" / name).read_text())
    assert [verb for verb, _line, _run in steps] == ["push", "attest", "release"]
    for verb, line, run in steps:
        argv = _tool_argv(line, scalars, {"dest": _ecr_flags(run, scalars), "args": checks})
        assert "--ecr" in argv and (verb != "release" or "--require-signed" in argv), argv
        if verb == "release":  # ECR's API sees what its registry holds (one store there, two here)
            digest = json.loads((tmp_path / "build/summary.json").read_text())["variants"][0]["digest"]
            ecr.put_tag(client, ImageRef(stand_in.host, repo, "content"), api.manifest(repo, digest), FAST)
        res = build_py(*argv)
        assert res.rc == 0, f"{name}: {' '.join(argv)}\n{res.err}"
        assert stand_in.password not in res.out + res.err
    released = ecr.existing_image(client, FAST)(ImageRef(stand_in.host, repo, f"{variant}-{sha}"))
    assert released is not None and released.digest == digest
    assert all(fallback(api, repo, digest, kind) is not None for kind in ("sbom", "att"))
