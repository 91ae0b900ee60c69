"""openssh: sshd and the ssh client, for multi-node launches (mpirun starts remote ranks over ssh).

mpi-operator v2 workers run `/usr/sbin/sshd -De` (no step of the image's own runs first), so the image is
ready for that as built, as aws/deep-learning-containers scripts/docker/common/install_efa.sh makes it:
- host keys at build (openssh-server's install makes them; `ssh-keygen -A` makes any that is missing), since
  `sshd -De` starts no key generation;
- /var/run/sshd (sshd's privilege separation directory);
- `session optional pam_loginuid.so` (a container may not set the login uid);
- the client trusts the cluster's hosts: `StrictHostKeyChecking no` and no known_hosts writes (hosts and pods
  come and go), in an ssh_config.d drop-in that only applies cluster-internal (the image has no other use of
  ssh). No user key is put in the image (the DLC script makes one): a private key in an image is a credential;
  mpi-operator mounts its own, Slurm and SageMaker launch without ssh.

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


class Openssh(Block):
    name = NAME
    layer = 25
    methods = ("apt", "packages", "base")
    system = True

    def libdirs(self, comp: Component) -> List[str]:
        return []

    def system_step(self, comp: Component, v: Variant) -> Optional[Tuple[str, str, Tuple[Any, ...]]]:
        if comp.method == "base":
            return None  # the base's own sshd and its configuration (a DLC's install_efa.sh made them)
        return "partials/openssh.j2", "configure", (SSHD, CLIENT_CONF)

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        ssh = lock_component(lock, NAME) or {}
        return [
            self.check(
                lock,
                "sshd-ready",
                "command",
                "`sshd -De` starts as mpi-operator runs it: config valid, host keys present, /var/run/sshd",
                {"command": f"test -d /var/run/sshd && {SSHD} -t", "expect_rc": 0},
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
                "mpirun's ssh to a new node must not stop at a host key prompt (StrictHostKeyChecking no)",
                {
                    "command": "ssh -G efa-image-build-node",
                    "expect_rc": 0,
                    "expect_output": r"(?m)^stricthostkeychecking (false|no)$",
                },
            ),
        ]

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


BLOCK = Openssh()
