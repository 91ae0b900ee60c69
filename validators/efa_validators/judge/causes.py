"""Cause before effect: the order of a report's findings, and the causal link each consequence names.

Why data: an expert reads a failed run from the root cause to its effects (no EFA device, so the plugin did
not initialise, so NCCL fell back to sockets, so the bandwidth is low), and the order is knowledge that
changes with the field, like the signatures. `LINKS` says which finding can follow from which, in the words
the consequence's message then carries; `KINDS` says what a finding is when nothing links it to a cause.

The reading order is total (`tier`, then depth, then catalog order):
  0. root causes: an error no link ties to a cause that fired (a misconfiguration, a missing device, a
     resource, a completion error...), and any finding a fired error follows from (a warning-level
     misconfiguration that an error names as its cause leads, as the error's cause);
  1. consequences: errors a link ties to a cause that fired, deeper ones later (the crash that names its
     cause is read after it);
  2. symptoms no link explains (a crash, a hang, a watchdog timeout, a rank's exit): what happened, after
     every cause the text shows;
  3. performance and advisory errors no link explains (GPUDirect RDMA not in use, low bandwidth): true,
     but never what a failed run is read from;
  4. warnings, 5. notes.
A performance finding that a fired error follows from is a cause (GDR off on a GDR-required instance makes
the plugin fail: tier 0). Ordering never changes a severity or a verdict.
"""

import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

TIERS = ("cause", "consequence", "symptom", "advisory", "warning", "note")
TIER_OF_SEVERITY = {"error": "cause", "warning": "warning", "info": "note"}

# what an error is when no link ties it to a cause that fired (every other error is a cause)
SYMPTOMS = frozenset(
    (
        "crash",
        "hang",
        "watchdog-timeout",
        "watchdog-hang",
        "python-exception",
        "rank-exit",
        "launcher-exit",
        "nccl-tests-no-results",
        "nccl-tests-failure",
        "nccl-tests-out-of-bounds",
        "nccl-tests-wrong-results",
    )
)
ADVISORY = frozenset(("gdr-disabled", "busbw-below-expected", "nccl-tests-min-bw-failed"))
KINDS = dict([(i, "symptom") for i in SYMPTOMS] + [(i, "advisory") for i in ADVISORY])

# effect <- cause: the sentence that ties them, one link a line (a line that starts with spaces goes on with
# the sentence above), read in this order: the first cause that fired is named. Text, not code: a link is
# reviewed as one line of field knowledge, and `_read_links` is the one place that reads the table.
_LINK_TABLE = """
plugin-missing <- plugin-dependency-missing:
    NCCL did not load the net plugin because a library it needs is missing
ofi-init-failed <- efa-devices-missing:
    aws-ofi-nccl failed to initialise because libfabric found no EFA device
ofi-init-failed <- libfabric-too-old: aws-ofi-nccl failed to initialise because its libfabric is too old
ofi-init-failed <- two-libfabrics:
    aws-ofi-nccl failed to initialise because two libfabric builds are on the library path
ofi-init-failed <- device-rdma-unsupported:
    aws-ofi-nccl failed to initialise because the EFA device has no RDMA read
ofi-init-failed <- gdr-disabled:
    aws-ofi-nccl failed to initialise because GPUDirect RDMA is unavailable on a GDR-required instance
ofi-init-failed <- env-value-refused:
    aws-ofi-nccl failed to initialise because it refused a value in the environment
plugin-missing <- env-net-plugin-unloadable:
    NCCL found no net plugin because NCCL_NET_PLUGIN names one it could not load
bootstrap-interface <- env-socket-ifname-unmatched:
    NCCL's bootstrap found no interface because NCCL_SOCKET_IFNAME selects none
socket-fallback <- ofi-init-failed: NCCL fell back to TCP sockets because the plugin failed to initialise
socket-fallback <- env-net-forced: NCCL runs over TCP sockets because NCCL_NET forces it
socket-fallback <- plugin-missing: NCCL fell back to TCP sockets because it found no net plugin
socket-fallback <- plugin-dependency-missing:
    NCCL fell back to TCP sockets because the net plugin could not be loaded
socket-fallback <- efa-devices-missing: NCCL fell back to TCP sockets because libfabric found no EFA device
network-ib <- env-net-forced: NCCL uses its internal IB transport because NCCL_NET forces it
network-ib <- plugin-missing: NCCL used its internal IB transport because it found no net plugin
network-ib <- plugin-dependency-missing:
    NCCL used its internal IB transport because the net plugin could not be loaded
gdr-disabled <- provider-not-efa: GPUDirect RDMA is off because the provider in use is not efa
gdr-disabled <- env-gdr-forbidden: GPUDirect RDMA is off because the environment forbids it
gdr-disabled <- env-device-rdma-off: GPUDirect RDMA is off because FI_EFA_USE_DEVICE_RDMA turns it off
provider-not-efa <- env-provider-forced: libfabric selected another provider because FI_PROVIDER names it
ll-corruption <- env-protocol-forced:
    the results are wrong because NCCL_PROTO enables LL/LL128 over a transport without ordering
nccl-tests-wrong-results <- env-protocol-forced:
    the results are wrong because NCCL_PROTO enables LL/LL128 over a transport without ordering
nccl-tests-out-of-bounds <- ll-corruption:
    nccl-tests counted values out of bounds because the results were corrupted
gin-init-failed <- gdrcopy-unavailable: NCCL initialised no GIN plugin because GDRCopy was unusable
gin-unavailable <- gin-init-failed: NCCL has no GIN because no GIN plugin initialised
gin-unavailable <- gdrcopy-unavailable: NCCL has no GIN because aws-ofi-nccl could not use GDRCopy
crash <- gin-unavailable: a rank failed because the program asked for GIN and NCCL has none
crash <- env-value-refused: a rank failed because NCCL refused a value in the environment
crash <- completion-error: a rank failed after a network completion error
crash <- bootstrap-interface: a rank failed after NCCL's bootstrap could not use its network interface
crash <- rank-topology-mismatch: a rank failed after the ranks disagreed on their network topology
crash <- topology-attribute-missing:
    NCCL's init failed with 'internal error' because its topology detection missed an attribute
crash <- resource-allocation-failed: a rank failed after an allocation failed
crash <- mr-registration-failed: a rank failed after memory registration failed
crash <- cuda-driver-too-old: a rank failed because the CUDA driver is older than the runtime
crash <- ofi-init-failed: a rank failed after the net plugin failed to initialise
crash <- launcher-start-failed: a rank failed after the launcher could not start the ranks
hang <- launcher-start-failed: the run stalled because the launcher could not start every rank
nccl-tests-no-results <- launcher-start-failed:
    nccl-tests printed no result because the launcher could not start the ranks
hang <- completion-error: the run stalled after a network completion error
hang <- bootstrap-interface: the run stalled after NCCL's bootstrap could not connect
hang <- rank-topology-mismatch: the run stalled after the ranks disagreed on their network topology
hang <- crash: the other ranks stalled after a rank died
watchdog-timeout <- completion-error: PyTorch's watchdog timed out after a network completion error
watchdog-timeout <- crash: PyTorch's watchdog timed out after a rank died
watchdog-timeout <- hang: PyTorch's watchdog timed out on the stalled run
watchdog-hang <- completion-error: PyTorch's watchdog got stuck after a network completion error
watchdog-hang <- crash: PyTorch's watchdog got stuck after a rank died
watchdog-hang <- hang: PyTorch's watchdog got stuck on the stalled run
busbw-below-expected <- socket-fallback: the bandwidth is low because NCCL runs over TCP sockets
busbw-below-expected <- gdr-disabled: the bandwidth is low because GPUDirect RDMA is off
busbw-below-expected <- env-p2p-disabled:
    the bandwidth is low with NCCL's intra-node P2P/SHM paths disabled in the environment
busbw-below-expected <- env-tuning-override:
    the bandwidth is low with NCCL's buffer or channel sizes overridden in the environment
nccl-tests-no-results <- crash: nccl-tests printed no result because a rank died
nccl-tests-no-results <- hang: nccl-tests printed no result because the run stalled
nccl-tests-no-results <- completion-error: nccl-tests printed no result after a network completion error
"""


def _read_links(table: str) -> Tuple[Tuple[str, str, str], ...]:
    """(effect, cause, sentence) per link of a table written as `_LINK_TABLE` is, in its order."""
    lines = []  # type: List[str]
    for line in table.splitlines():
        if line[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        elif line.strip():
            lines.append(line.strip())
    links = []
    for line in lines:
        effect, rest = line.split(" <- ", 1)
        cause, said = rest.split(":", 1)
        links.append((effect, cause, said.strip()))
    return tuple(links)


LINKS = _read_links(_LINK_TABLE)

# a Python exception follows from what a crash follows from (PyTorch raises NCCL's and CUDA's errors)
LINKS += tuple(
    ("python-exception", cause, said.replace("a rank failed", "a Python process raised an exception", 1))
    for effect, cause, said in LINKS
    if effect == "crash"
)

# What `validators run` itself saw (efa_validators/run/report.py, `later` to `order`): a rank or the launcher
# exiting non-zero is the end of what its output shows, a consequence of the first of these that fired (a
# failure the output names, then a stall, then a root cause). The runner's `hang` (ended by its idle or total
# timeout) is the `hang` of LINKS; `output-limit`, `launch-mismatch` and `parser-error` are causes of their
# own; `leftover-processes`, `long-lines`, `output-cut`, `no-output` are warnings: each by its severity.
EXIT_CAUSES = (
    ("crash", "because it failed"),
    ("launcher-start-failed", "because it could not start the ranks"),
    ("watchdog-timeout", "after PyTorch's watchdog timed out"),
    ("watchdog-hang", "after PyTorch's watchdog got stuck"),
    ("hang", "after the run lost its peers"),
    ("completion-error", "after a network completion error"),
    ("bootstrap-interface", "after NCCL's bootstrap could not use its network interface"),
    ("rank-topology-mismatch", "after the ranks disagreed on their network topology"),
    ("topology-attribute-missing", "after NCCL's topology detection missed an attribute"),
    ("resource-allocation-failed", "after an allocation failed"),
    ("mr-registration-failed", "after memory registration failed"),
    ("cuda-driver-too-old", "because the CUDA driver is older than the runtime"),
    ("ofi-init-failed", "after the net plugin failed to initialise"),
    ("env-value-refused", "after NCCL refused a value in the environment"),
)
LINKS += tuple(
    (effect, cause, f"{who} exited non-zero {why}")
    for effect, who in (("rank-exit", "a rank"), ("launcher-exit", "the launcher"))
    for cause, why in EXIT_CAUSES
)


def order(findings: List[dict], later: Sequence[dict] = ()) -> List[dict]:
    """The findings in reading order (the module's tiers), each consequence with `caused_by` and its link in
    the message.

    `later`: what was seen after the output's last line (`validators run`'s own findings: the hang it ended,
    a rank's exit). They may follow from the output's findings, never cause them: a run the runner ended
    after PyTorch's watchdog timed out still leads with the timeout, as `parse` of its log does.
    Stable: within a tier and depth a finding keeps its place (catalog order, then `later`). The dicts are
    changed in place.
    """
    fired = {f["id"] for f in findings}
    cause_of = _links(fired, fired)
    after = _links({f["id"] for f in later}, fired)
    errors = {f["id"] for f in list(findings) + list(later) if f.get("severity") == "error"}
    leading = _leading(errors, list(cause_of.items()) + list(after.items()))
    depth = {fid: _depth(fid, cause_of) for fid in fired}
    keyed = []
    for i, f in enumerate(list(findings) + list(later)):
        links = cause_of if i < len(findings) else after
        cause, said = links.get(f["id"], (None, ""))
        if cause is not None and not f.get("caused_by"):
            f["caused_by"] = cause
            f["message"] = "{} (see {}): {}".format(said, cause, f.get("message") or "")
        if i < len(findings):
            deep = depth[f["id"]]
        else:
            deep = 0 if cause is None else depth[cause] + 1
        keyed.append((tier(f, cause is not None, f["id"] in leading), deep, i, f))
    # what was seen after the output never goes ahead of the output's own root: no earlier tier than its
    ranked = [k[0] for k in keyed[: len(findings)] if k[0] < TIERS.index("warning")]
    floor = min(ranked) if ranked else 0
    keyed[len(findings) :] = [(max(t, floor), d, i, f) for t, d, i, f in keyed[len(findings) :]]
    return [f for _, _, _, f in sorted(keyed, key=lambda k: k[:3])]


def _leading(errors: Set[str], links: list) -> Set[str]:
    """The findings a fired error follows from, directly or through other causes (a warning that causes a
    warning that causes an error leads too): bounded by the links that fired."""
    leading = set()  # type: Set[str]
    grew = True
    while grew:
        grew = False
        for effect, (cause, _) in links:
            if (effect in errors or effect in leading) and cause not in leading:
                leading.add(cause)
                grew = True
    return leading


def _links(effects: Set[str], fired: Set[str]) -> Dict[str, Tuple[str, str]]:
    """effect -> (its cause, the sentence): the first link in LINKS from a cause that fired."""
    out = {}  # type: Dict[str, Tuple[str, str]]
    for effect, cause, said in LINKS:
        if effect in effects and cause in fired and effect not in out and effect != cause:
            out[effect] = (cause, said)
    return out


def tier(finding: dict, caused: bool, leads: bool) -> int:
    """The index in TIERS of a finding: `caused`, a link ties it to a cause that fired; `leads`, a fired
    error follows from it."""
    if finding.get("severity") == "error" or leads:
        if caused:
            return TIERS.index("consequence")
        if leads:
            return TIERS.index("cause")
        return TIERS.index(KINDS.get(finding["id"], "cause"))
    return TIERS.index(TIER_OF_SEVERITY.get(finding.get("severity"), "note"))


def _depth(fid: str, cause_of: Dict[str, Tuple[str, str]]) -> int:
    """How many links lead back to a root cause (a loop in the data counts as none)."""
    seen = {fid}
    n = 0
    while fid in cause_of:
        fid = cause_of[fid][0]
        if fid in seen:
            return 0
        seen.add(fid)
        n += 1
    return n


def chain(findings: List[dict], fid: str) -> List[str]:
    """The ids from the root cause to `fid` (ordered findings: each `caused_by` names one that fired)."""
    by_id = {f["id"]: f for f in findings}
    out = [fid]
    while by_id.get(out[-1], {}).get("caused_by") and by_id[out[-1]]["caused_by"] not in out:
        out.append(by_id[out[-1]]["caused_by"])
    return out[::-1]


def root_cause(findings: List[dict]) -> Optional[dict]:
    """The first finding of ordered findings that is an error or that an error names as its cause (a
    warning-level misconfiguration a failure follows from), or None: what the report leads with."""
    named = _named_causes(findings)
    for f in findings:
        if f.get("severity") == "error" or f["id"] in named:
            return f
    return None


def _named_causes(findings: List[dict]) -> Set[str]:
    """The causes an error names, and theirs in turn (a chain of warnings that ends in an error)."""
    named = {f["caused_by"] for f in findings if f.get("severity") == "error" and f.get("caused_by")}
    grew = True
    while grew:
        grew = False
        for f in findings:
            if f["id"] in named and f.get("caused_by") and f["caused_by"] not in named:
                named.add(f["caused_by"])
                grew = True
    return named


def kind(finding: dict, findings: List[dict]) -> str:
    """cause, consequence, symptom or advisory: a finding of a failed run, read as `order` reads it."""
    if finding.get("caused_by"):
        return "consequence"
    if finding["id"] in _named_causes(findings):
        return "cause"
    return KINDS.get(finding["id"], "cause")


def misordered(findings: List[dict]) -> Optional[str]:
    """Why a report's findings do not lead with the run's cause, or None: checked from the outside, on the
    report as written (the measurement of tests/validators/judge/test_cause_first.py).

    A finding that names its cause comes after it; the report's first finding is its root cause (an error,
    or what an error names); and that root is a cause when the text shows one, else a symptom, and only
    where neither is shown a performance or advisory finding."""
    first_at = {}  # type: Dict[str, int]
    for i, f in enumerate(findings):
        first_at.setdefault(f["id"], i)
    for i, f in enumerate(findings):
        c = f.get("caused_by")
        if c and first_at.get(c, len(findings)) > i:
            return "{} comes before its cause {}".format(f["id"], c)
    lead = root_cause(findings)
    if lead is None:
        return None
    if findings[0] is not lead:
        return "{} ({}) comes before the root cause {}".format(
            findings[0]["id"], findings[0].get("severity"), lead["id"]
        )
    named = _named_causes(findings)
    roots = [
        f for f in findings if not f.get("caused_by") and (f.get("severity") == "error" or f["id"] in named)
    ]
    rank = ("cause", "symptom", "advisory")
    best = min(roots, key=lambda f: rank.index(kind(f, findings)))
    if rank.index(kind(lead, findings)) > rank.index(kind(best, findings)):
        return "the report leads with {} ({}), but {} is a {}".format(
            lead["id"], kind(lead, findings), best["id"], kind(best, findings)
        )
    return None


def lead_sentence(findings: List[dict]) -> Optional[str]:
    """`root cause: <title> (<id>): <message>; remedy: <the remedy's first sentence>`, or None: one sentence
    for the report's first line (the finding below it keeps the whole remedy)."""
    f = root_cause(findings)
    if f is None:
        return None
    what = f.get("title") or f["id"]
    text = "root cause: {} ({}): {}".format(what, f["id"], (f.get("message") or "").rstrip(". "))
    first = next((e.get("text") for e in f.get("evidence") or () if e.get("text")), None)
    if first:
        text += f" (`{_said(first)}`)"
    remedy = _SENTENCE_END.split(f.get("remedy") or "", 1)[0].strip().rstrip(".")
    if remedy[1:2].islower():  # "Pass ..." reads "pass ..." inside the sentence; "GPU ..." stays
        remedy = remedy[:1].lower() + remedy[1:]
    return text + ("; remedy: " + remedy if remedy else "") + "."


def _said(text: str) -> str:
    """A log line as the lead quotes it: from its NCCL level on (the head names the host elsewhere), short."""
    for level in (" NCCL WARN ", " NCCL INFO "):
        i = text.find(level)
        if i >= 0:
            text = text[i + len(level) :]
            break
    text = text.strip().replace("`", "'")
    return text if len(text) <= 160 else text[:157] + "..."


_SENTENCE_END = re.compile(r"(?<=[a-z0-9)`'])\.\s+(?=[A-Z])")
