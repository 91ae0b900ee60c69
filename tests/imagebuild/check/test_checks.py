"""Static checks on real images: the local image passes; images broken on purpose fail the right check.

The good image is `local-debian-nccl2.27` built from matrix.local.yaml (once per session; a no-op when CI has
already built it, since the content-hash tag exists). Each broken image is derived FROM it with a tiny
Dockerfile, so it differs in exactly one way, and must fail exactly the check named for that way.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest
from cli import build_py, build_py_process
from paths import ROOT
from services import RUN
from throwaway import derived_images

from imagebuild.check import custom
from imagebuild.check.expectations import derive
from imagebuild.check.probes import (
    Target,
    apt_pins,
    binaries_load,
    env_policy,
    expand_env,
    labels,
    no_credentials,
    pkgconfig_prefix,
    same_version,
    single_plugin,
)
from imagebuild.check.runner import check_image
from imagebuild.components import RESOLVED_PACKAGES, apt_pin_matches
from imagebuild.variant import LOCK_LABELS

VARIANT = "local-debian-nccl2.27"
BROKEN_REPO = f"efa-image-build-test-{RUN}/broken"
PLUGIN_CHECKS = {"plugin-present", "plugin-ldd", "plugin-discoverable", "plugin-version", "single-plugin"}


# ---------------------------------------------------------------- pure parts


def _lock(**components) -> dict:
    return {
        "schema": "efa-image-build/lock/v1",
        "name": "t",
        "components": components,
        "env": [],
        "labels": {},
    }


def test_every_check_is_listed_and_absent_components_are_skipped_with_a_reason():
    exps = derive(_lock(nccl={"version": "2.27.7"}))
    names = [e.name for e in exps]
    assert len(names) == len(set(names))
    by = {e.name: e for e in exps}
    assert by["nccl-version-ctypes"].skip is None and by["nccl-version-ctypes"].params["version"] == "2.27.7"
    for name in PLUGIN_CHECKS | {"fi-info-efa", "efa-installer-record", "nccl-tests-binaries", "torch-nccl"}:
        assert by[name].skip and "variant has no" in by[name].skip
    assert "SageMaker" in by["sagemaker-entry-point"].skip


def test_every_component_present_turns_its_checks_on():
    lock = _lock(
        nccl={"version": "2.27.7"},
        # the installer's plugin (its libcudart.so dlopen checked), from an installer with an NGC mode
        aws_ofi_nccl={"version": "1.21.1", "method": "installer"},
        efa_installer={"version": "1.50.0", "prefix": "/opt/amazon/efa", "method": "installer"},
        libfabric={"version": "2.6.0"},
        openmpi={"version": "5.0.6"},
        nccl_tests={"version": "2.19.6"},
        gdrcopy={"version": "2.5.1"},
        torch={"version": "2.13.0"},
        openssh={"version": "9.2p1", "method": "apt", "packages": ["openssh-server=1:9.2p1-*"]},
    )
    lock["components"]["nccl"]["method"] = "source"  # nccl.pc comes from a source build only
    lock["training"] = {"entry_point": "train.py", "sagemaker": True}
    lock["base"] = {"kind": "dlc"}  # the DLC-only checks (root mpirun as typed, the DLC's mca params) too
    skipped = {e.name: e.skip for e in derive(lock) if e.skip}
    # a DLC ships AWS's toolchain: the one check a DLC base turns off, for that reason
    assert list(skipped) == ["runtime-no-build-tools"] and "DLC" in skipped["runtime-no-build-tools"]
    lock["base"] = {"kind": "local"}
    assert sorted(e.name for e in derive(lock) if e.skip) == ["mpirun-plain-root", "openmpi-dlc-mca-params"]


def test_the_locks_own_checks_come_last_as_custom_and_a_malformed_record_stays_unknown():
    lock = _lock(nccl={"version": "2.27.7"})
    lock["checks"] = {"b-file": {"path": "/x"}, "a-cmd": {"command": "true"}, "c-meta": {"metadata": {}},
                      "d-what": {"colour": "red"}}  # fmt: skip
    exps = derive(lock)
    assert [(e.name, e.probe) for e in exps[-4:]] == [
        ("custom:a-cmd", "custom_command"),
        ("custom:b-file", "custom_path"),
        ("custom:c-meta", "custom_metadata"),
        ("custom:d-what", "custom_unknown"),
    ]
    assert not any(e.name.startswith("custom:") for e in exps[:-4])
    assert custom.PROBES["custom_unknown"](_data_target(), {})[0] == "unknown"
    lock["checks"] = ["not", "a", "mapping"]
    assert [(e.name, e.probe) for e in derive(lock) if e.name.startswith("custom:")] == [
        ("custom:checks", "custom_unknown")
    ]


def test_docker_env_substitution_as_the_env_lines_did_it():
    value = "/opt/a/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    assert expand_env(value, {}) == "/opt/a/lib"
    assert expand_env(value, {"LD_LIBRARY_PATH": "/x"}) == "/opt/a/lib:/x"
    assert expand_env("${NOPE:-dflt}/$HOME", {"HOME": "/root"}) == "dflt//root"


def test_single_plugin_wants_one_build_directory():
    """A source-built plugin next to an EFA installer's bundled one: two places, NCCL loads either."""

    def found(files):
        answer = json.dumps({"files": files})
        return Target(run=lambda cmd: (0, answer, ""), env={}, labels={}, history=[], lock={})

    own = ["/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so", "/opt/aws-ofi-nccl/lib/libnccl-net.so"]
    assert single_plugin(found(own), {})[0] == "pass"
    bundled = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"
    status, detail = single_plugin(found(own + [bundled]), {})
    assert status == "fail" and "2 places" in detail and "/opt/amazon/ofi-nccl" in detail
    assert single_plugin(found([]), {})[0] == "fail"


def test_versions_compare_as_numbers():
    assert same_version("1.17.0-3", "1.17.0") and same_version("2.27.7", "2.27.7")
    assert not same_version("1.10.0", "1.9.0")
    assert same_version("1.2", None) is None


def _data_target(env=None, lbls=None, history=None) -> Target:
    """A Target made only of image metadata: these probes read metadata, not the container."""

    def no_container(cmd: str):
        return 1, "", "no such file"  # `test -e FILE` for credential files: absent

    return Target(run=no_container, env=env or {}, labels=lbls or {}, history=history or [], lock={})


def test_a_host_provided_library_is_the_only_missing_one_a_binary_may_have():
    """gdrcopy's tests need libcuda.so.1 from the host's driver; any other unresolved library fails them."""
    ldd = {
        "/opt/g/bin/sanity": "\tlibgdrapi.so.2 => /opt/g/lib/libgdrapi.so.2\n\tlibcuda.so.1 => not found\n",
        "/opt/g/bin/copybw": "\tlibcuda.so.1 => not found\n\tlibgdrapi.so.2 => not found\n",
    }

    class Image(Target):
        def inventory(self, *args: str):  # ("find", *names): the files of those names
            return {"files": sorted(f for f in ldd if f.rsplit("/", 1)[-1] in args[1:])}, ""

    target = Image(
        run=lambda cmd: (0, ldd[cmd.rsplit(" ", 1)[-1]], ""), env={}, labels={}, history=[], lock={}
    )
    both = {"binaries": ["sanity", "copybw"], "prefix": "/opt/g"}
    status, detail = binaries_load(target, {**both, "host_provided": ["libcuda.so.1"]})
    assert status == "fail" and detail == "/opt/g/bin/copybw: libgdrapi.so.2 => not found"
    status, detail = binaries_load(
        target, {**both, "binaries": ["sanity"], "host_provided": ["libcuda.so.1"]}
    )
    assert status == "pass" and "libcuda.so.1 from the host's driver" in detail
    status, detail = binaries_load(target, {**both, "binaries": ["sanity"]})  # no host library named: fail
    assert status == "fail" and "libcuda.so.1 => not found" in detail


def test_env_policy_wants_exact_values_and_no_unlisted_nccl_or_fi_vars():
    params = {"env": {"NCCL_DEBUG": "INFO"}, "prefixes": ["NCCL_", "FI_"], "ignore": ["NCCL_ALGO"]}
    assert env_policy(_data_target({"NCCL_DEBUG": "INFO", "PATH": "/bin"}), params)[0] == "pass"
    status, detail = env_policy(_data_target({"NCCL_DEBUG": "WARN"}), params)
    assert status == "fail" and "NCCL_DEBUG='WARN'" in detail
    status, detail = env_policy(_data_target({"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}), params)
    assert status == "fail" and "FI_PROVIDER" in detail
    assert env_policy(_data_target({"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"}), params)[0] == "pass"


def test_credentials_are_found_in_env_labels_and_history():
    params = {"patterns": derive(_lock())[3].params["patterns"], "files": []}
    assert no_credentials(_data_target({"A": "b"}, {"x": "y"}, ["RUN make"]), params)[0] == "pass"
    key = "AKIA" + "Q" * 16
    assert no_credentials(_data_target({"K": key}), params)[0] == "fail"
    assert no_credentials(_data_target(history=["RUN echo aws_secret_access_key=zzz"]), params)[0] == "fail"
    status, detail = no_credentials(_data_target(lbls={"note": f"built with {key}"}), params)
    assert status == "fail" and "label note" in detail and key not in detail  # never echo the secret


def test_labels_must_equal_the_lock():
    params = {"labels": {"a": "1", "b": "2"}}
    assert labels(_data_target(lbls={"a": "1", "b": "2", "c": "3"}), params)[0] == "pass"
    assert labels(_data_target(lbls={"a": "1"}), params)[0] == "fail"


# ---------------------------------------------------------------- nccl.pc and apt pins (issue 21, item 6)


def _files(files: dict, dpkg: str = "") -> Target:
    """A Target that answers `cat FILE` from `files` and dpkg-query with `dpkg`."""

    def run(cmd: str):
        if cmd.startswith("dpkg-query"):
            return (0, dpkg, "") if dpkg else (1, "", "no packages found")
        path = cmd.split(" ", 1)[1].strip("'")
        return (0, files[path], "") if path in files else (1, "", f"cat: {path}: No such file or directory")

    return Target(run=run, env={}, labels={}, history=[], lock={})


PC = (
    "prefix={}\nexec_prefix=${{prefix}}\nlibdir=${{exec_prefix}}/lib\nincludedir=${{prefix}}/include\n"
    "\nName: nccl\n"
)


def test_nccl_pc_must_name_the_prefix_nccl_is_installed_in():
    pc, params = "/opt/nvidia/nccl/lib/pkgconfig/nccl.pc", {"prefix": "/opt/nvidia/nccl"}
    params["file"] = pc
    assert pkgconfig_prefix(_files({pc: PC.format("/opt/nvidia/nccl")}), params)[0] == "pass"
    status, detail = pkgconfig_prefix(_files({pc: PC.format("/usr/local")}), params)
    assert status == "fail" and "prefix=/usr/local" in detail and "/opt/nvidia/nccl" in detail
    status, detail = pkgconfig_prefix(_files({}), params)
    assert status == "fail" and "no " + pc in detail


def test_the_nccl_pc_check_is_for_source_builds_only():
    for method, on in (("source", True), ("wheel", False), ("base", False)):
        lock = _lock(nccl={"version": "2.27.7", "method": method, "prefix": "/opt/nvidia/nccl"})
        (exp,) = [e for e in derive(lock) if e.name == "nccl-pkgconfig-prefix"]
        assert (exp.skip is None) == on, method
        assert exp.params["file"] == "/opt/nvidia/nccl/lib/pkgconfig/nccl.pc"
    (exp,) = [e for e in derive(_lock()) if e.name == "nccl-pkgconfig-prefix"]
    assert "variant has no nccl" in exp.skip


def test_an_apt_pin_matches_exactly_or_by_upstream_version():
    assert apt_pin_matches("openssh-server=1:8.9p1-3ubuntu0.16", "1:8.9p1-3ubuntu0.16")
    assert not apt_pin_matches("openssh-server=1:8.9p1-3ubuntu0.16", "1:8.9p1-3ubuntu0.17")
    assert apt_pin_matches("openssh-server=1:8.9p1-*", "1:8.9p1-3ubuntu0.17")
    assert not apt_pin_matches("openssh-server=1:8.9p1-*", "1:8.9p10-1")  # another upstream version
    assert not apt_pin_matches("openssh-server=1:8.9p1-*", "1:8.9p1-x-1")  # upstream 8.9p1-x
    assert not apt_pin_matches("openssh-server=1:8.9p1-*", "8.9p1-3")  # another epoch
    assert not apt_pin_matches("openssh-server=1:8.9p1-*", "1:8.9p1-")


def test_the_openssh_packages_check_compares_by_upstream_version_and_the_record():
    pins = ["openssh-server=1:9.2p1-*", "openssh-client=1:9.2p1-2+deb12u10"]
    params = {"pins": pins, "version": "9.2p1", "record": RESOLVED_PACKAGES}
    installed = "openssh-server 1:9.2p1-2+deb12u10\nopenssh-client 1:9.2p1-2+deb12u10\n"
    record = {"packages": [{"package": "openssh-server", "pin": pins[0], "version": "1:9.2p1-2+deb12u10"}]}
    status, detail = apt_pins(_files({RESOLVED_PACKAGES: json.dumps(record)}, installed), params)
    assert (
        status == "pass"
        and "openssh-server 1:9.2p1-2+deb12u10 (pin openssh-server=1:9.2p1-*, recorded)" in detail
    )
    newer = installed.replace("server 1:9.2p1-2+deb12u10", "server 1:9.2p1-2+deb12u11")
    status, detail = apt_pins(_files({RESOLVED_PACKAGES: json.dumps(record)}, newer), params)
    assert status == "fail" and "records 1:9.2p1-2+deb12u10" in detail
    other = installed.replace("server 1:9.2p1-2+deb12u10", "server 1:9.3p1-1")
    status, detail = apt_pins(_files({RESOLVED_PACKAGES: json.dumps(record)}, other), params)
    assert status == "fail" and "the pin is openssh-server=1:9.2p1-*" in detail
    assert apt_pins(_files({}, installed), params)[0] == "fail"  # a pin by upstream version needs its record
    assert (
        apt_pins(_files({}, installed), dict(params, pins=pins[1:]))[0] == "pass"
    )  # exact: no record needed
    assert apt_pins(_files({}, ""), params)[0] == "fail"


def test_the_openssh_packages_check_skips_a_base_openssh():
    (exp,) = [
        e
        for e in derive(_lock(openssh={"version": "8.9p1", "method": "base"}))
        if e.name == "openssh-packages"
    ]
    assert exp.skip and "no apt pins" in exp.skip


@pytest.fixture
def pc_image(docker_client, local_base):
    """A container of the local base holding two fake nccl.pc files: one as NCCL's src.build writes it with
    PREFIX, one as it writes it without (/usr/local)."""
    tag = f"efa-image-build-test-{RUN}/ncclpc:probe"
    lines = [f"FROM {local_base}"]
    for prefix in ("/opt/nvidia/nccl", "/opt/unprefixed"):
        text = PC.format("/usr/local" if prefix == "/opt/unprefixed" else prefix).replace("\n", "\\n")
        lines.append(
            f"RUN mkdir -p {prefix}/lib/pkgconfig && printf '{text}' > {prefix}/lib/pkgconfig/nccl.pc"
        )
    docker_client.images.build(fileobj=io.BytesIO("\n".join(lines).encode()), tag=tag, rm=True, forcerm=True)
    box = docker_client.containers.run(tag, ["sleep", "300"], detach=True, remove=True)
    try:
        yield box
    finally:
        box.kill()
        docker_client.images.remove(tag, force=True)


@pytest.mark.docker
def test_the_nccl_pc_probe_reads_the_file_in_a_container(pc_image):
    def run(cmd: str):
        res = pc_image.exec_run(["sh", "-c", cmd], demux=True)
        out, err = res.output
        return res.exit_code, (out or b"").decode(), (err or b"").decode()

    target = Target(run=run, env={}, labels={}, history=[], lock={})
    for prefix, want in (("/opt/nvidia/nccl", "pass"), ("/opt/unprefixed", "fail"), ("/opt/none", "fail")):
        params = {"file": f"{prefix}/lib/pkgconfig/nccl.pc", "prefix": prefix}
        assert pkgconfig_prefix(target, params)[0] == want, prefix


# ---------------------------------------------------------------- real images


@pytest.fixture(scope="session")
def local_image(docker_client, local_base, tmp_path_factory):
    """The local matrix's image, built once (the content tag makes a rebuild of the same content a no-op)."""
    out = tmp_path_factory.mktemp("local-build")
    argv = ["build", "--matrix", str(ROOT / "matrix.local.yaml"), "--variant", VARIANT, "--out", str(out)]
    rc = build_py(*argv, "--cache", ROOT / ".cache" / "artifacts", "--plain").rc
    summary = json.loads((out / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
    assert rc == 0, f"building {VARIANT} failed: {entry.get('error')} (log {entry['log']})"
    lock = json.loads((out / VARIANT / "variant.lock.json").read_text())
    return entry["tags"][0], lock


@pytest.fixture(scope="session")
def derive_image(docker_client, local_image):
    """Build `FROM <good image>` + a few Dockerfile lines; remove every image made here at the end."""
    with derived_images(docker_client, local_image[0], BROKEN_REPO) as build:
        yield build


def _statuses(report) -> dict:
    return {c["name"]: c["status"] for c in report.checks}


@pytest.fixture(scope="session")
def good_report(docker_client, derive_image, local_image):
    ref, lock = local_image
    # The spine's template gives no `train` launcher yet (reported); SageMaker needs one. Added here only when
    # missing, so the baseline is an image SageMaker could start; the gap itself shows in `build.py test`.
    probe = docker_client.containers.run(ref, ["sh", "-c", "command -v train || true"], remove=True)
    if not probe.strip():
        ref = derive_image(
            "baseline",
            "RUN printf '#!/bin/sh\\nexec python3 \"$SAGEMAKER_SUBMIT_DIRECTORY/$SAGEMAKER_PROGRAM\"\\n' "
            "> /usr/local/bin/train && chmod +x /usr/local/bin/train",
        )
    return ref, check_image(docker_client, ref, lock=lock, lock_file=f"{VARIANT}/variant.lock.json")


@pytest.mark.docker
def test_local_image_passes_every_check_that_applies(good_report):
    _ref, report = good_report
    st = _statuses(report)
    bad = {c["name"]: c["detail"] for c in report.checks if c["status"] not in ("pass", "skip")}
    assert not bad, bad
    assert report.passed
    for name in ("nccl-version-ctypes", "single-libnccl", "single-libfabric", "runtime-no-build-tools"):
        assert st[name] == "pass"
    # the wheel's nccl.h stays in the builder with every other header: nothing to compare, said as a skip
    assert st["nccl-version-header"] == "skip"
    assert st["mpirun-as-root"] == "pass" and st["validators-import"] == "pass"
    assert st["validators-compiled"] == "pass"
    assert all(st[n] == "skip" for n in PLUGIN_CHECKS)  # no plugin in this variant: skipped, never passed
    assert report.passed and sum(1 for s in st.values() if s == "pass") >= 12
    # the team's own checks of matrix.local.yaml (and its checks.local.yaml) ran, in the same report
    custom = {n: s for n, s in st.items() if n.startswith("custom:")}
    assert custom == dict.fromkeys(
        ("custom:entry-point-file", "custom:sagemaker-code-dir", "custom:training-entry-point-runs"), "pass"
    )


def _failed(report) -> set:
    return {c["name"] for c in report.checks if c["status"] in ("fail", "unknown")}


def _fails_only(docker_client, ref: str, name: str) -> str:
    """Check `ref` (its own checks trusted): `name` is the one check that does not pass; its detail."""
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert _failed(report) == {name}
    return next(c["detail"] for c in report.checks if c["name"] == name)


@pytest.mark.docker
def test_the_teams_own_check_alone_fails_an_image_it_catches(docker_client, derive_image, good_report):
    ref = derive_image("entry-point-writable", "RUN chmod 666 /opt/ml/code/train.py", base=good_report[0])
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert _failed(report) == {"custom:entry-point-file"} and not report.passed
    detail = next(c["detail"] for c in report.checks if c["name"] == "custom:entry-point-file")
    assert "permissions -rw-rw-rw- (want -rw-r--r--)" in detail


@pytest.mark.docker
def test_second_libfabric_fails_single_libfabric(docker_client, derive_image, good_report):
    ref = derive_image(
        "second-libfabric",
        "RUN mkdir -p /opt/stray/lib && cp -L /usr/lib/x86_64-linux-gnu/libfabric.so.1 /opt/stray/lib/ "
        "&& echo /opt/stray/lib > /etc/ld.so.conf.d/000-stray.conf && ldconfig",
        base=good_report[0],
    )
    detail = _fails_only(docker_client, ref, "single-libfabric")
    assert "2 different libfabric.so.1" in detail and "/opt/stray/lib/libfabric.so.1" in detail


@pytest.mark.docker
def test_validators_without_bytecode_fail_validators_compiled(docker_client, derive_image, good_report):
    ref = derive_image(
        "no-bytecode",
        "RUN find /opt/efa-image-build/efa_validators -name __pycache__ -prune -exec rm -rf {} +",
        base=good_report[0],
    )
    detail = _fails_only(docker_client, ref, "validators-compiled")
    # the last module named, in a stage folder (the detail keeps the end of the output)
    assert "scan/progress.py" in detail


@pytest.mark.docker
def test_a_compiler_or_cuda_header_in_the_runtime_fails_runtime_no_build_tools(
    docker_client, derive_image, good_report
):
    """Files where a compiler and the toolkit put them; a static library under a component's prefix."""
    ref = derive_image(
        "build-tools",
        "RUN mkdir -p /usr/lib/gcc/x86_64-linux-gnu/12 /usr/local/cuda/include "
        "&& touch /usr/lib/gcc/x86_64-linux-gnu/12/cc1plus /usr/local/cuda/include/cuda_runtime_api.h "
        "/opt/nvidia/nccl/lib/libnccl_static.a",
        base=good_report[0],
    )
    detail = _fails_only(docker_client, ref, "runtime-no-build-tools")
    for path in (
        "cc1plus",
        "/usr/local/cuda/include/cuda_runtime_api.h",
        "/opt/nvidia/nccl/lib/libnccl_static.a",
    ):
        assert path in detail


@pytest.mark.docker
def test_second_libnccl_fails_single_libnccl(docker_client, derive_image, good_report):
    ref = derive_image(
        "second-libnccl",
        "RUN cp -L /opt/nvidia/nccl/lib/libnccl.so.2 /usr/local/lib/ && ldconfig",
        base=good_report[0],
    )
    _fails_only(docker_client, ref, "single-libnccl")


@pytest.mark.docker
def test_forbidden_env_fails_env_forbidden(docker_client, derive_image, good_report, local_image):
    forbidden = local_image[1]["env_forbidden"][0]["name"]
    ref = derive_image("forbidden-env", f"ENV {forbidden}=Ring", base=good_report[0])
    assert forbidden in _fails_only(docker_client, ref, "env-forbidden")


@pytest.mark.docker
def test_credentials_in_history_fail_no_credentials(docker_client, derive_image, good_report):
    ref = derive_image(
        "credentials", "RUN echo aws_secret_access_key=not-a-real-one > /dev/null", base=good_report[0]
    )
    _fails_only(docker_client, ref, "no-credentials")


@pytest.mark.docker
def test_plugin_promised_but_absent_fails_the_plugin_checks(
    docker_client, derive_image, good_report, local_image
):
    """The lock says aws-ofi-nccl is in the image and it is not: what a removed plugin looks like here."""
    lock = json.loads(json.dumps(local_image[1]))
    lock["components"]["aws_ofi_nccl"] = {
        "version": "1.16.3",
        "prefix": "/opt/aws-ofi-nccl",
        "method": "source",
    }
    # LABEL values go through the builder's variable substitution: escape `$` so the lock stays as written
    label = json.dumps(json.dumps(lock, sort_keys=True, separators=(",", ":"))).replace("$", "\\$")
    ref = derive_image("plugin-missing", f"LABEL {LOCK_LABELS[0]}={label}", base=good_report[0])
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert "plugin-present" in _failed(report) and _failed(report) <= PLUGIN_CHECKS
    assert "no libnccl-net" in next(c["detail"] for c in report.checks if c["name"] == "plugin-present")


@pytest.mark.docker
def test_cli_on_an_image_writes_json_and_junit_and_exits_1(derive_image, good_report, tmp_path):
    ref = derive_image("cli-forbidden", "ENV NCCL_ALGO=Tree", base=good_report[0])
    json_path, xml_path = tmp_path / "r.json", tmp_path / "r.xml"
    proc = build_py_process("test", "--image", ref, "--json", json_path, "--junit", xml_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # each failed check on stdout with its reason, not only the counts
    (line,) = [x for x in proc.stdout.splitlines() if "fail    env-forbidden" in x]
    assert "NCCL_ALGO" in line, proc.stdout
    report = json.loads(json_path.read_text())
    assert report["schema"] == "efa-image-build/check-report/v1"
    (image,) = report["images"]
    assert image["passed"] is False and image["image_id"].startswith("sha256:")
    assert {c["name"]: c["status"] for c in image["checks"]}["env-forbidden"] == "fail"
    cases = {c.get("name"): c for c in ET.parse(xml_path).getroot().iter("testcase")}
    assert cases["test_check[env-forbidden]"].find("failure") is not None
    assert cases["test_check[plugin-present]"].find("skipped") is not None
    assert cases["test_check[single-libnccl]"].find("failure") is None


@pytest.mark.docker
def test_an_image_without_a_lock_is_bad_input(local_base):
    res = build_py("test", "--image", local_base)
    assert res.rc == 2
    assert "carries no lock label" in res.err


@pytest.mark.docker
def test_test_escapes_what_an_image_says_before_it_reaches_the_terminal(docker_client, local_base, tmp_path):
    """A trusted label's check path and name, and what a check quotes, are the image's words: printed raw, an
    ESC sequence retitles or clears the terminal and a newline forges a line of the verdict. `test` prints
    each through report.printable (the validators' escaping): one line, every control character escaped."""
    lock = {"schema": "efa-image-build/lock/v1", "name": "esc", "components": {}, "env": [], "labels": {},
            "checks": {"ev\x1b[8mil": {"path": "/tmp/\x1b]0;pwned\x07\x1b[2J\nPASS all good"}}}  # fmt: skip
    label = json.dumps(json.dumps(lock, sort_keys=True)).replace("$", "\\$")
    tag = f"{BROKEN_REPO}:escapes-{RUN}"
    dockerfile = f"FROM {local_base}\nLABEL {LOCK_LABELS[0]}={label}\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    try:
        proc = build_py_process("test", "--image", tag, "--trust-image-checks", "--json", tmp_path / "r.json",
                                "--junit", tmp_path / "r.xml", timeout=300)  # fmt: skip
    finally:
        docker_client.images.remove(tag, force=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not set(proc.stdout) & {"\x1b", "\x07"} and "Traceback" not in proc.stderr, repr(proc.stdout)
    (line,) = [x for x in proc.stdout.splitlines() if "custom:ev" in x]
    shown = "/tmp/\\x1b]0;pwned\\x07\\x1b[2J\\x0aPASS all good"  # one line, each control character escaped
    assert line == "  fail    custom:ev\\x1b[8mil: " + shown + " does not exist"
    assert not any(x.startswith("PASS all good") for x in proc.stdout.splitlines())
    # the JSON report keeps the words as they were (json escapes them)
    (image,) = json.loads((tmp_path / "r.json").read_text())["images"]
    detail = {c["name"]: c["detail"] for c in image["checks"]}["custom:ev\x1b[8mil"]
    assert detail == "/tmp/\x1b]0;pwned\x07\x1b[2J\nPASS all good does not exist"


def _shell_target() -> Target:
    """A Target whose commands run in a real local shell: the bounded wrapper's plumbing, without docker."""

    def run(cmd: str):
        proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr

    return Target(run=run, env={}, labels={}, history=[], lock={})


def test_a_check_command_keeps_its_status_and_streams_and_is_cut_past_its_output_cap(tmp_path):
    """issue 32, item 4: a command check's output had no bound (600 MB printed made the check process
    1.26 GB); a file check on /dev/zero ran `cat` unbounded. Both are cut in the shell that runs them."""
    t = _shell_target()
    p = {"command": "sh", "args": ["-c", "echo out 42; echo err >&2; exit 3"], "exit_code": 3,
         "expected_output": ["^out 42$"], "expected_error": ["^err$"]}  # fmt: skip
    assert custom.custom_command(t, p) == (
        "pass",
        "`sh -c 'echo out 42; echo err >&2; exit 3'` exited 3 as expected",
    )
    started = time.monotonic()
    rc, out, err = t.run(custom.bounded(["sh", "-c", "head -c 600000000 /dev/zero; echo done >&2"], 30))
    assert len(out) == custom.MAX_OUTPUT + 1 and time.monotonic() - started < 20  # ended on its cut pipe
    flood = {"command": "sh", "args": ["-c", "head -c 5000000 /dev/zero | tr '\\0' x >&2"]}
    status, detail = custom.custom_command(t, flood)
    assert status == "fail" and "stderr cut at 1048576 bytes" in detail
    assert custom.custom_path(t, {"path": "/dev/zero", "expected_contents": ["x"]}) == (
        "fail", "/dev/zero is not a regular file: its contents are not read")  # fmt: skip
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (custom.MAX_OUTPUT + 10))
    status, detail = custom.custom_path(t, {"path": str(big), "expected_contents": ["x"]})
    assert status == "fail" and "larger than 1048576 bytes" in detail
    small = tmp_path / "small.txt"
    small.write_text("VERSION_CODENAME=bookworm\n")
    assert (
        custom.custom_path(t, {"path": str(small), "expected_contents": ["^VERSION_CODENAME=bookworm$"]})[0]
        == "pass"
    )


def test_checks_from_an_image_label_are_not_run_unless_trusted():
    lock = {"checks": {"a": {"command": "true"}, "b": {"path": "/etc"}}}
    exps = custom.untrusted(derive(lock))
    mine = [e for e in exps if e.name.startswith("custom:")]
    assert [(e.name, e.probe, e.params) for e in mine] == [("custom:a", custom.UNTRUSTED, {}),
                                                           ("custom:b", custom.UNTRUSTED, {})]  # fmt: skip
    status, detail = custom.PROBES[custom.UNTRUSTED](_shell_target(), {})
    assert status == "unknown" and "--trust-image-checks" in detail
