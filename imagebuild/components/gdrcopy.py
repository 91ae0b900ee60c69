"""gdrcopy: NVIDIA GDRCopy's user-space library (the gdrdrv kernel module belongs to the host).

Parameters:
  version   e.g. `2.6` (the catalog pins the commit)
  method    source (`make prefix=... lib lib_install`), base
  prefix    default /opt/gdrcopy

Examples (matrix):
  gdrcopy: {version: "2.6"}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild.components import Block, lock_component
from imagebuild.components.expectation import Expectation

NAME = "gdrcopy"


class Gdrcopy(Block):
    name = NAME
    layer = 80
    methods = ("source", "base")
    tools = ("make", "gcc")

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        gdr = lock_component(lock, NAME) or {}
        return [
            self.check(
                lock,
                "gdrcopy-library",
                "find_library",
                "GDRCopy's user-space library is installed (the kernel module is the host's)",
                {"patterns": ["libgdrapi.so*"], "prefix": gdr.get("prefix")},
            )
        ]


BLOCK = Gdrcopy()
