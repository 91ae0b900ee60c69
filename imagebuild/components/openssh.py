"""openssh: sshd and the ssh client, for multi-node launches (mpirun starts remote ranks over ssh).

Set up as mpi-operator's own base image and ADT's nccl-tests image do (kubeflow/mpi-operator build/base
Dockerfile; awsome-distributed-training micro-benchmarks/nccl-tests/nccl-tests.Dockerfile):
- sshd and the client on port 2222 (PORT), in sshd_config.d / ssh_config.d drop-ins: with host networking
  (EKS with EFA, Slurm) port 22 is the host's own sshd;
- `StrictModes no`: mpi-operator mounts its key Secret on ~/.ssh, whose modes fail sshd's checks; also for
  a base's own sshd (`source: base`, a DLC's), whose setup is otherwise kept: the line goes first in its
  sshd_config (the first value sshd reads wins), and the workers pass `-o StrictModes=no` too;
- a base's own sshd may have no host keys (the AL2023 DLC's has none): its workers run base_sshd_command,
  `ssh-keygen -A` (each missing type) then `sshd -De -p BASE_PORT`, so keys are made in the container;
- no host keys in the image (the package's install makes some; they are removed): every container of an image
  would share them. START makes this container's keys and runs `sshd -De`; the printed MPIJob's workers run
  it (mpi-operator's default worker command, `/usr/sbin/sshd -De`, would find no keys);
- /var/run/sshd (sshd's privilege separation directory); `session optional pam_loginuid.so` (a container may
  not set the login uid);
- the client trusts the cluster's hosts: `StrictHostKeyChecking no` and no known_hosts writes (hosts and pods
  come and go). No user key is put in the image (the DLC script makes one): a private key in an image is a
  credential; mpi-operator mounts its own, Slurm and SageMaker launch without ssh.

Parameters:
  version   upstream release (`9.2p1`)
  source    apt pins of openssh-server (it pulls openssh-client of its own version) and openssh-client, or
            `base` (already in the base, configured there). A pin is exact (`name=1:9.2p1-2+deb12u10`) or
            by upstream version (`name=1:9.2p1-*`): the newest build of it the archive has, resolved,
            checked and recorded in the build (an archive pocket keeps only its newest build, so an exact
            pin breaks when the next one is published)
  prefix    /usr

Examples (matrix):
  openssh: {version: "9.2p1", source: {apt: [openssh-server=1:9.2p1-2+deb12u10]}}
  openssh: {version: "9.2p1", source: {apt: ["openssh-server=1:9.2p1-*", "openssh-client=1:9.2p1-*"]}}
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Optional, Tuple

from imagebuild.components import RESOLVED_PACKAGES, Block, lock_component
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component, Variant

NAME = "openssh"
SSHD = "/usr/sbin/sshd"
CLIENT_CONF = "/etc/ssh/ssh_config.d/efa-image-build.conf"
SERVER_CONF = "/etc/ssh/sshd_config.d/efa-image-build.conf"
SERVER_MAIN = "/etc/ssh/sshd_config"  # a base's own sshd's config: StrictModes goes first there
PORT = 2222  # mpi-operator's, on both sides (kubeflow/mpi-operator build/base Dockerfile)
START = "/usr/local/sbin/efa-sshd"
# A base's own sshd (a DLC's): its setup's port, the client's default (install_efa.sh sets no other)
BASE_PORT = 22


def base_sshd_command(port: int, options: Tuple[str, ...] = ()) -> str:
    """The shell line that starts a base's own sshd in a container, host keys made first where absent
    (efa_validators.run.sm_mpi.base_sshd_line: the SageMaker MPI fallback runs the same in the image)."""
    from efa_validators.run.sm_mpi import base_sshd_line

    return base_sshd_line(port, options)


class Openssh(Block):
    name = NAME
    layer = 25
    methods = ("apt", "packages", "base")
    system = True

    def libdirs(self, comp: Component) -> List[str]:
        return []

    def system_step(self, comp: Component, v: Variant) -> Optional[Tuple[str, str, Tuple[Any, ...]]]:
        if comp.method == "base":
            # the base's own sshd and its setup (a DLC's install_efa.sh: port 22, its keys), less StrictModes
            return "partials/openssh.j2", "strictmodes_off", (SSHD, SERVER_MAIN)
        return "partials/openssh.j2", "configure", (SSHD, CLIENT_CONF, SERVER_CONF, PORT, START)

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        ssh = lock_component(lock, NAME) or {}
        ours = bool(ssh) and ssh.get("method") != "base"
        return [
            self.sshd_check(lock, ssh),
            self.check(
                lock,
                "ssh-host-keys-not-baked",
                "command",
                "no host key in the image: each container makes its own at start (shared keys let one node "
                "pose as any other)",
                {"command": "! ls /etc/ssh/ssh_host_*_key 2>/dev/null", "expect_rc": 0},
                present=ours,
                unless=BASE_SSHD,
            ),
            self.check(
                lock,
                "ssh-version",
                "command",
                "the ssh client is the locked OpenSSH",
                {
                    "command": "ssh -V",
                    "expect_rc": 0,
                    "expect_output": r"OpenSSH_" + str(ssh.get("version") or "").replace(".", r"\.") + r"\b",
                },
            ),
            self.packages_check(lock, ssh),
            self.check(
                lock,
                "ssh-client-trusts-cluster",
                "command",
                "mpirun's ssh to a new node must not stop at a host key prompt (StrictHostKeyChecking no)"
                + (f" and goes to the nodes' sshd port ({PORT})" if ours else ""),
                {
                    "command": "ssh -G efa-image-build-node",
                    "expect_rc": 0,
                    "expect_output": r"(?ms)(?=.*^stricthostkeychecking (false|no)$)"
                    + (rf"(?=.*^port {PORT}$)" if ours else ""),
                },
            ),
        ]

    def sshd_check(self, lock: Mapping[str, Any], ssh: Mapping[str, Any]) -> Expectation:
        """sshd starts: ours as START runs it (keys made, port and StrictModes from the drop-in); a base's own
        as its image has it (config valid; host keys are made at start where it has none)."""
        if ssh.get("method") == "base":
            # a throwaway host key: a base may have none (the AL2023 DLC's), and the workers make theirs at
            # start (base_sshd_command), so the check proves the config, not keys nobody uses
            key = "/tmp/efa-image-build-sshd-check"
            command, why = (
                f"test -d /var/run/sshd && ssh-keygen -q -t ed25519 -N '' -f {key} && {SSHD} -t -h {key} "
                f"&& {SSHD} -T -h {key} | grep -x 'strictmodes no'",
                "the base's sshd: config valid, no StrictModes (the key Secret mpi-operator mounts on .ssh "
                "fails its checks); host keys are made by each container at start where the base has none",
            )
        else:
            # a throwaway host key, never /etc/ssh's: the image has none, and ssh-host-keys-not-baked says so
            key = "/tmp/efa-image-build-sshd-check"
            command = (
                f"test -d /var/run/sshd && test -x {START} && grep -q 'ssh-keygen -A' {START} "
                f"&& ssh-keygen -q -t ed25519 -N '' -f {key} && {SSHD} -t -h {key} "
                f"&& {SSHD} -T -h {key} | grep -x 'port {PORT}' "
                f"&& {SSHD} -T -h {key} | grep -x 'strictmodes no'"
            )
            why = f"sshd starts as {START} runs it (keys made there): valid, port {PORT}, no StrictModes"
        return self.check(lock, "sshd-ready", "command", why, {"command": command, "expect_rc": 0})

    def packages_check(self, lock: Mapping[str, Any], ssh: Mapping[str, Any]) -> Expectation:
        """The installed openssh-server/-client are the pinned builds: exactly, or by upstream version (the
        build resolved and recorded which) with the lock's upstream version."""
        pins = list(ssh.get("packages") or [])
        exp = self.check(
            lock,
            "openssh-packages",
            "apt_pins",
            "the installed OpenSSH packages are the pinned builds: the exact version, or for a pin by "
            "upstream version a build of it, the one recorded in " + RESOLVED_PACKAGES,
            {"pins": pins, "version": ssh.get("version"), "record": RESOLVED_PACKAGES},
        )
        if exp.skip is None and not pins:
            return replace(exp, skip=f"openssh is installed by method {ssh.get('method')}: no apt pins")
        return exp


# The base's own sshd is configured there (a DLC's install_efa.sh: port 22; keys at build on Ubuntu, none on
# AL2023, so the workers make missing ones at start: base_sshd_command).
BASE_SSHD = "the base's own sshd, configured there (port; host keys a base may have): not set up by this tool"


BLOCK = Openssh()
