"""The static check `efa-installer-not-ngc` (issue 34, item 2) run for real in a Debian container: it passes
on a plain image and fails once a package named as the EFA installer's NGC-mode plugin is installed (dpkg), as
an installer >= 1.48 that went NGC mode would leave it (catalog efa_installers.yaml `ngc`). The package is one
we build here with dpkg-deb under that name: what is tested is the check's dpkg query, not the plugin."""

from __future__ import annotations

import pytest
from throwaway import run_script

from imagebuild import catalog
from imagebuild.check.expectations import derive
from imagebuild.components import efa_installer

pytestmark = pytest.mark.docker


def test_the_not_ngc_check_sees_the_ngc_package_installed(local_base):
    (check,) = [
        e
        for e in derive({"components": {efa_installer.NAME: {"version": "1.50.0", "method": "installer"}}})
        if e.name == "efa-installer-not-ngc"
    ]
    package = catalog.efa_installers()["ngc"]["plugin_packages"][0]
    control = (
        f"Package: {package}\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: test <t@example.invalid>\\n"
    )
    control += "Description: stand-in named as the NGC plugin package\\n"
    script = "\n".join(
        [
            "set -e",
            f"if ! ( {check.params['command']} ); then echo PLAIN-FAILED; exit 3; fi",
            f"mkdir -p /tmp/pkg/DEBIAN && printf '{control}' > /tmp/pkg/DEBIAN/control",
            "dpkg-deb --build /tmp/pkg /tmp/ngc.deb >/dev/null && dpkg -i /tmp/ngc.deb >/dev/null",
            f"if ( {check.params['command']} ); then echo NGC-PASSED; exit 4; fi",
            "echo refused",
        ]
    )
    run = run_script(local_base, script, "efa-image-build-test-ngc")
    assert run.returncode == 0 and run.stdout.strip() == "refused", (run.stdout, run.stderr)
