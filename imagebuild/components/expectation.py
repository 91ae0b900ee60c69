"""One static check as data (in the spirit of container-structure-test): what to probe, why, and with what.

The checks come from `imagebuild.check.expectations` (generic ones) and from each component's block
(`imagebuild.components`); `probes` evaluates them inside a container of the image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional


@dataclass(frozen=True)
class Expectation:
    """One check: `probe` names the evaluator, `params` its data; `skip` says why it does not apply."""

    name: str
    probe: str
    why: str
    params: Dict[str, Any] = field(default_factory=dict)
    component: Optional[str] = None
    skip: Optional[str] = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "probe": self.probe,
            "why": self.why,
            "params": self.params,
            "component": self.component,
            "skip": self.skip,
        }

    @classmethod
    def from_json(cls, d: dict) -> Expectation:
        return cls(d["name"], d["probe"], d["why"], d.get("params") or {}, d.get("component"), d.get("skip"))
