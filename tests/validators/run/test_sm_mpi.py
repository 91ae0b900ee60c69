"""efa_validators.run.sm_mpi without a cluster: the mpirun words it becomes, its key, bad input."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from efa_validators.run import sm_mpi

VALS = {"sm_hosts": "algo-1,algo-2", "sm_current_host": "algo-1", "sm_master": "algo-1", "sm_node_rank": "0",
        "sm_nodes": "2", "sm_ifname": "eth0"}  # fmt: skip


def test_the_first_host_adds_ranks_hosts_and_the_jobs_key_after_mpirun():
    argv = sm_mpi.launch_argv(["/usr/bin/mpirun", "--tag-output", "prog", "-b", "8"], VALS, 8, "/k", 2222)
    assert argv[0] == "/usr/bin/mpirun" and argv[-3:] == ["prog", "-b", "8"]
    assert argv[argv.index("-np") + 1] == "16" and argv[argv.index("-H") + 1] == "algo-1:8,algo-2:8"
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert "-p 2222 -i /k -o IdentitiesOnly=yes" in rsh
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth0"  # the interface SageMaker names


def test_the_key_is_installed_private_and_authorized(tmp_path):
    src = tmp_path / "channel"
    src.mkdir()
    (src / "id_ed25519").write_text("PRIVATE\n")
    (src / "id_ed25519.pub").write_text("ssh-ed25519 AAAA job\n")
    home = tmp_path / "home"
    key = sm_mpi.install_key(str(src), str(home))
    assert open(key).read() == "PRIVATE\n" and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert (home / ".ssh" / "authorized_keys").read_text() == "ssh-ed25519 AAAA job\n"
    assert stat.S_IMODE(os.stat(home / ".ssh").st_mode) == 0o700


def test_a_missing_channel_or_config_is_exit_2_not_a_traceback(tmp_path):
    config = tmp_path / "rc.json"
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    env = dict(os.environ, HOME=str(tmp_path))
    absent = str(tmp_path / "absent.json")
    for extra in (["--ssh-dir", str(tmp_path / "none"), "--resource-config", str(config)],
                  ["--ssh-dir", str(tmp_path), "--resource-config", absent]):  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-m", "efa_validators.run.sm_mpi", "--slots", "1", *extra, "--", "mpirun", "x"],
            capture_output=True, text=True, timeout=30, env=env,
        )  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.startswith("sm_mpi: ") and "Traceback" not in proc.stderr


def test_a_base_sshd_gets_host_keys_made_at_start_strictmodes_off_on_the_jobs_port():
    """An image without the tool's START (an AL2023 DLC: sshd and no host keys) gets its keys made first; it
    ran `sshd -D -p PORT`, which exits with 'no hostkeys available' there."""
    argv = sm_mpi.sshd_argv(2222, start_ok=False)
    assert argv[:2] == ["/bin/sh", "-c"]
    line = argv[2]
    assert line.index("ssh-keygen -A") < line.index("exec /usr/sbin/sshd -De -p 2222 -o StrictModes=no")
    assert sm_mpi.sshd_argv(2222, start_ok=True) == [sm_mpi.START]  # START makes its keys itself
    assert sm_mpi.sshd_argv(2200, start_ok=True) == [sm_mpi.START, "-p", "2200"]
