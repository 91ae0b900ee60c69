"""The pytest-testinfra module `build.py test` runs against one container (see runner.py).

It reads its plan (container, image metadata, expectations) from the JSON file named by
EFA_IMAGE_CHECK_PLAN, evaluates one test per expectation through testinfra's docker backend, and appends
each outcome to the plan's results file, so the JSON report carries pass/fail/unknown/skip exactly as
the JUnit XML does. Unknown fails the test: evidence that could not be seen never passes.
"""

from __future__ import annotations

import json
import os

import pytest
import testinfra

from imagebuild.check import custom
from imagebuild.check.expectations import Expectation
from imagebuild.check.probes import PROBES, Target


def _plan() -> dict:
    path = os.environ.get("EFA_IMAGE_CHECK_PLAN")
    if not path:
        pytest.skip(
            "EFA_IMAGE_CHECK_PLAN not set: run through `efa-image-build test`", allow_module_level=True
        )
    with open(path) as f:
        return json.load(f)


PLAN = _plan()
EXPECTATIONS = [Expectation.from_json(e) for e in PLAN["expectations"]]
EVALUATORS = {**PROBES, **custom.PROBES}  # the derived checks' and the team's own (custom:<name>)


def _record(name: str, status: str, detail: str) -> None:
    with open(PLAN["results"], "a") as f:
        f.write(json.dumps({"name": name, "status": status, "detail": detail}) + "\n")


@pytest.fixture(scope="module")
def target() -> Target:
    host = testinfra.get_host(f"docker://root@{PLAN['container']}")

    def run(cmd: str):
        res = host.run(cmd)
        return res.rc, res.stdout, res.stderr

    return Target(
        run=run,
        env=PLAN["env"],
        labels=PLAN["labels"],
        history=PLAN["history"],
        lock=PLAN["lock"],
        python=PLAN["python"],
        entrypoint=PLAN.get("entrypoint"),
        config=PLAN.get("config") or {},
    )


@pytest.mark.parametrize("exp", EXPECTATIONS, ids=[e.name for e in EXPECTATIONS])
def test_check(exp: Expectation, target: Target) -> None:
    if exp.skip:
        _record(exp.name, "skip", exp.skip)
        pytest.skip(exp.skip)
    try:
        status, detail = EVALUATORS[exp.probe](target, exp.params)
    except Exception as err:  # a probe that crashed saw nothing: unknown, and say why
        status, detail = "unknown", f"probe {exp.probe} raised {type(err).__name__}: {err}"
    _record(exp.name, status, detail)
    if status == "skip":
        pytest.skip(detail)
    assert status == "pass", f"{exp.name}: {status}: {detail}"
