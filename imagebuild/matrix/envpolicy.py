"""The env policy by version, and the env linter. Data: imagebuild/catalog/envpolicy.yaml.

The seed recipe set five variables everywhere (FI_PROVIDER, NCCL_PROTO, FI_EFA_USE_DEVICE_RDMA,
NCCL_LAUNCH_MODE, NCCL_NET_SHARED_COMMS). Current guidance says most of them are only needed on old stacks
and some hurt on new ones, so each is set only where the versions need it, with the reason recorded in the
lock and shown by `build.py explain-env`. Conditions compare versions numerically (imagebuild.versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from imagebuild import catalog
from imagebuild.catalog import ANY_VERSION
from imagebuild.variant import EnvVar, ForbiddenEnv
from imagebuild.versions import satisfies


@dataclass(frozen=True)
class StackFacts:
    """What the env policy conditions look at: the stack's component versions and target instances
    (not efa_validators.parse.facts.Facts, which is what a log showed)."""

    versions: Tuple[Tuple[str, str], ...]
    instance_types: Tuple[str, ...] = ()

    def version(self, name: str) -> Optional[str]:
        return dict(self.versions).get(name)

    def instance_flag(self, flag: str) -> Optional[bool]:
        """True/False when every named instance agrees; None when there are none or they are unknown/mixed."""
        profiles = catalog.instances()
        values = {profiles.get(t, {}).get(flag) for t in self.instance_types}
        if not self.instance_types or None in values or len(values) != 1:
            return None
        return bool(values.pop())


@dataclass(frozen=True)
class Decision:
    """One policy rule applied to one variant: set or not, and why."""

    name: str
    value: Optional[str]
    applies: bool
    reason: str
    source: str
    overridable: bool = False  # a default a site may replace (node-check accepts another value)


@dataclass(frozen=True)
class Finding:
    """One env linter finding about the user's `env:`."""

    severity: str  # error | warning | info
    name: str
    message: str
    source: str


def _holds(when: Mapping[str, str], facts: StackFacts) -> Tuple[bool, str]:
    """Whether every clause holds, and the first reason one does not (for explain-env)."""
    for key, spec in when.items():
        if key.startswith("instances."):
            flag = facts.instance_flag(key.split(".", 1)[1])
            want = str(spec).lower() == "true"
            if flag is None:
                return (
                    False,
                    f"{key.split('.', 1)[1]} of the target instances is unknown (name instance_types)",
                )
            if flag != want:
                return False, f"the target instances have {key.split('.', 1)[1]}={str(flag).lower()}"
            continue
        have = facts.version(key)
        if have is None:
            return False, f"no {key} in this variant"
        if spec != ANY_VERSION and not satisfies(have, spec):
            return False, f"{key} {have} is not {spec}"
    return True, ""


def _rule_holds(rule: Mapping, facts: StackFacts) -> Tuple[bool, str]:
    alternatives = list(rule.get("any_of") or []) or [rule.get("when") or {}]
    why_not = []
    for when in alternatives:
        ok, why = _holds(when, facts)
        if ok:
            return True, ""
        why_not.append(why)
    return False, "; ".join(why_not)


def decide(facts: StackFacts) -> List[Decision]:
    """Every `set` rule with its outcome for these facts, in policy order."""
    out = []
    for rule in catalog.env_policy()["set"]:
        ok, why_not = _rule_holds(rule, facts)
        reason = (
            " ".join(rule["reason"].split())
            if ok
            else (" ".join(rule.get("reason_unset", "").split()) + (f" ({why_not})" if why_not else ""))
        )
        source = " ".join(rule["source"].split())
        value = str(rule["value"]) if ok else None
        out.append(Decision(rule["name"], value, ok, reason, source, bool(rule.get("overridable"))))
    return out


def policy_env(facts: StackFacts) -> List[EnvVar]:
    return [
        EnvVar(d.name, d.value or "", d.reason, d.source, "policy", d.overridable)
        for d in decide(facts)
        if d.applies
    ]


def forbidden(facts: StackFacts) -> List[ForbiddenEnv]:
    """Variables the image must not set for these versions (the static checks confirm they are absent)."""
    out = []
    for rule in catalog.env_policy()["forbid"]:
        if rule.get("only_value_not") is not None or rule.get("lint_only"):
            continue  # value-dependent or harmless advice: only the linter reports it
        ok, _ = _rule_holds(rule, facts)
        if ok and not any(e.name == rule["name"] for e in policy_env(facts)):
            out.append(
                ForbiddenEnv(
                    rule["name"],
                    " ".join(rule["reason"].split()),
                    rule["source"],
                    rule.get("severity", "warning"),
                )
            )
    return out


def lint(user_env: Mapping[str, str], facts: StackFacts) -> List[Finding]:
    """Review the user's extra env against the field's advice: forbidden, unneeded or conflicting."""
    findings: List[Finding] = []
    decisions = {d.name: d for d in decide(facts)}
    for name in sorted(user_env):
        value = user_env[name]
        for rule in catalog.env_policy()["forbid"]:
            if rule["name"] != name:
                continue
            if rule.get("only_value_not") is not None and value == str(rule["only_value_not"]):
                continue
            ok, _ = _rule_holds(rule, facts)
            if ok:
                findings.append(
                    Finding(
                        rule.get("severity", "warning"),
                        name,
                        f"{name}={value}: " + " ".join(rule["reason"].split()),
                        rule["source"],
                    )
                )
        dec = decisions.get(name)
        if dec is not None and not any(f.name == name for f in findings):
            if dec.applies and dec.value != value and dec.overridable:
                findings.append(
                    Finding(
                        "info",
                        name,
                        f"{name}={value} replaces the policy's default {dec.value}, a site setting"
                        f" the policy leaves to you: {dec.reason}",
                        dec.source,
                    )
                )
            elif dec.applies and dec.value != value:
                findings.append(
                    Finding(
                        "warning",
                        name,
                        f"{name}={value} overrides the policy value {dec.value}: {dec.reason}",
                        dec.source,
                    )
                )
            elif not dec.applies:
                findings.append(
                    Finding("info", name, f"{name}={value} is not needed here: {dec.reason}", dec.source)
                )
    return findings


def explain(
    facts: StackFacts, env: Sequence[EnvVar], forbidden_env: Sequence[ForbiddenEnv]
) -> Dict[str, List]:
    """What explain-env prints: every variable set (with why), and every policy variable left unset (why)."""
    set_names = {e.name for e in env}
    unset = [d for d in decide(facts) if not d.applies and d.name not in set_names]
    return {"set": list(env), "unset": unset, "forbidden": list(forbidden_env)}
