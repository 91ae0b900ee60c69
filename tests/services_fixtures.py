"""pytest fixtures over tests/services.py: a registry (plain and htpasswd), moto's server, small real images.

A plugin module (`pytest_plugins = ["services_fixtures"]` in the tests that use it), kept apart from
services.py so the helpers there can be imported by test modules directly.
"""

from __future__ import annotations

import os
from typing import List, NamedTuple

import pytest
from conftest import needed
from services import (
    REGISTRY_BIN,
    SMALL_TAGS,
    MotoServer,
    RawServer,
    Registry,
    build_small_image,
    small_lock,
)

from imagebuild.adapters.registry import Credentials, RegistryAPI


@pytest.fixture(scope="session")
def registry() -> Registry:
    """A real registry without auth."""
    if not os.path.exists(REGISTRY_BIN):
        needed(REGISTRY_BIN, "apt install docker-registry")
    reg = Registry().start()
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def auth_registry() -> Registry:
    """A real registry with htpasswd (bcrypt) auth: user h6user."""
    if not os.path.exists(REGISTRY_BIN):
        needed(REGISTRY_BIN, "apt install docker-registry")
    reg = Registry(user="h6user", password="h6-Secret-pw-9271").start()
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def arm64_base(docker_client) -> str:
    """The arm64 local base (`build.py base --platform linux/arm64`, `make base` on a host that emulates)."""
    import docker

    from imagebuild.building.localbase import default_name, emulation_problem
    from imagebuild.catalog.platforms import platform

    name = default_name("linux/arm64")
    problem = emulation_problem(platform("linux/arm64"), os.uname().machine)
    if problem is not None:
        needed(f"arm64 emulation ({problem})", "scripts/setup-host.sh installs and enables qemu-user-static")
    try:
        docker_client.images.get(name)
    except docker.errors.ImageNotFound:
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(f"{name} missing: run `python build.py base --platform linux/arm64`")
        pytest.skip(f"{name} missing: run `python build.py base --platform linux/arm64`")
    return name


@pytest.fixture(scope="session")
def moto_server() -> MotoServer:
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def aws(moto_server, monkeypatch) -> MotoServer:
    """moto's server, reset, with dummy credentials in this test's environment only."""
    moto_server.reset()
    for key, value in MotoServer.env().items():
        monkeypatch.setenv(key, value)
    return moto_server


@pytest.fixture(scope="session")
def small_images(docker_client, local_base):
    """Two distinct small images (A: nccl 2.26.2, B: nccl 2.27.7), removed with all their tags at the end;
    their engine tags are SMALL_TAGS, this run's own (two sessions on one engine never share a tag)."""
    made = {
        "a": build_small_image(docker_client, local_base, small_lock("h6-a", nccl="2.26.2"), SMALL_TAGS["a"]),
        "b": build_small_image(docker_client, local_base, small_lock("h6-b"), SMALL_TAGS["b"]),
    }
    yield made
    for image in made.values():
        try:
            docker_client.images.remove(image.id, force=True)
        except Exception:  # noqa: BLE001 - already gone is fine
            pass


@pytest.fixture
def ecr_token_registry(aws) -> Registry:
    """A real registry whose htpasswd user is `AWS` with moto's ECR token as password: `aws ecr
    get-login-password | docker login --username AWS --password-stdin` against it checks the token the CLI
    got, not only that the commands ran. moto's token is fixed per account, so it is read before the start."""
    import base64

    import boto3

    if not os.path.exists(REGISTRY_BIN):
        needed(REGISTRY_BIN, "apt install docker-registry")
    ecr = boto3.client("ecr", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    user, _, password = base64.b64decode(token).decode().partition(":")
    reg = Registry(user=user, password=password).start()
    yield reg
    reg.stop()


class EcrStandIn(NamedTuple):
    """ECR for a test in this process: moto's API, `ecr_token_registry` as its registry host."""

    registry: Registry  # the token-checking registry standing in for ECR's registry host
    host: str  # what the tool's `imagebuild.adapters.ecr.registry_host` answers here
    to_ecr: List[str]  # the destination flags of a verb: ECR through moto's server
    api: RegistryAPI  # the test's own reader of that registry, logged in with the token


@pytest.fixture
def ecr_stand_in(aws, ecr_token_registry, monkeypatch) -> EcrStandIn:
    """ECR's API is moto's server and its registry the token-checking stand-in. The one substitution: moto
    hands out a registry host that does not exist, so this process's `imagebuild.adapters.ecr.registry_host`
    answers the stand-in's host (monkeypatch); the verbs must then run in this process (cli.build_py)."""
    reg = ecr_token_registry
    monkeypatch.setattr("imagebuild.adapters.ecr.registry_host", lambda _client, _policy=None: reg.host)
    return EcrStandIn(
        registry=reg,
        host=reg.host,
        to_ecr=["--ecr", "--region", "us-east-1", "--endpoint-url", aws.endpoint_url],
        api=RegistryAPI(reg.host, Credentials(reg.user, reg.password)),
    )


@pytest.fixture
def raw_server():
    """Start a RawServer with the given answer (a hostile or odd registry); every one started is stopped at
    the end."""
    started = []

    def start(answer) -> RawServer:
        server = RawServer(answer).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
