"""NCCL_DEBUG=INFO lines in, events out.

Why a parser and not greps: the facts that matter (is every NET connection on EFA,
with GPUDirect RDMA?) are printed in formats that changed across NCCL 2.4 .. 2.2x and
aws-ofi-nccl 1.x (`Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0`, `Channel 00/0 :
0[0] -> 1[0] [send] via NET/Libfabric/0(1)/GDRDMA(PCI)/Shared`, `Selected Provider is efa`
vs `Selected provider is efa, fabric is efa-direct (found 16 nics)`). Each event keeps the
emitter (`host:pid:tid [dev]` head) so the fold can judge every rank on its own.

The formats were read from NVIDIA/nccl (`src/transport/net.cc` INFO lines, `init.cc`) and
aws/aws-ofi-nccl (`NCCL_OFI_INFO` strings in `nccl_ofi_net.cpp`, `platform-aws.cpp`);
see docs/validators.md for the list.
"""

import re
from typing import Dict, List, Optional, Tuple

from efa_validators.scan.prefix import strip_prefix

# ---------------------------------------------------------------------------- messages
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)[^\s+]*(?:\+cuda(\d+\.\d+))?")
_DRIVER = re.compile(r"cudaDriverVersion (\d+)")
_OFI_INIT = re.compile(r"NET/OFI Initializing (\S+) v?(\d[\w.+-]*)\s*$")
_OFI_LIBFABRIC = re.compile(r"NET/OFI Using Libfabric version (\d+\.\d+(?:\.\d+)?)")
_OFI_CUDA = re.compile(r"NET/OFI Using CUDA driver version (\d+)(?: with runtime (\d+))?")
_OFI_CUDA_RT = re.compile(r"NET/OFI Using CUDA runtime version (\d+)")
_OFI_PLATFORM_SELECTED = re.compile(r"NET/OFI Plugin selected platform: (\S+)")
_OFI_RUNNING_ON = re.compile(r"NET/OFI Running on (\S+) platform")
_OFI_TUNER_PLATFORM = re.compile(r"NET/OFI NCCL_OFI_TUNER is not available for platform : ([^,\s]+)")
_OFI_PROVIDER = re.compile(
    r"NET/OFI Selected [Pp]rovider is ([^,\s]+)(?:, fabric is ([^\s,]+))?(?:\s*\(found (\d+) nics?\))?"
)
_OFI_NDEV = re.compile(r"NET/OFI Forcing AWS OFI ndev (\d+)")
_GDR_DISABLED = re.compile(
    r"GDR disabled|disabling GDR|GDR not supported|GPU Direct RDMA Disabled|GDR is not supported"
    r"|does not support GDR|GDR support is not available",
    re.I,
)
# NCCL 2.4 src/transport/net.cc, 2.5-2.12 src/graph/paths.cc: "GPU Direct RDMA Enabled for GPU %lx / HCA %d
# (distance %d <= %d), read %d" (read 0: sends go through host memory; receives use GDR)
_GDR_ENABLED = re.compile(r"GPU Direct RDMA Enabled for [^,]*, read (\d)")
_PLUGIN_INIT_FAILED = re.compile(
    r"NET/OFI .*initiali[sz]ation failed|NET/OFI Initializing plugin failed"
    r"|NET/OFI Unable to find a protocol that worked"
    r"|NET/OFI Couldn't find any optimal provider"  # aws-ofi-nccl < 1.6 src/nccl_ofi_net.c: no provider
)
_PLUGIN_LOADED = re.compile(
    r"NET/Plugin ?: ?Loaded (?:net|external net) plugin (.*)"
    r"|Successfully loaded external (?:network )?plugin (\S+)"
)
# NCCL 2.18 src/net.cc: "Plugin load (libnccl-net.so) returned 2 : ...", "No plugin found, using internal
# implementation"; 2.19-2.22: "dlerror=... No plugin found (libnccl-net.so), using internal implementation";
# 2.23+ src/plugin/plugin_open.cc: "Could not find: ofi libnccl-net-ofi.so. Using internal net plugin."
_PLUGIN_FAILED = re.compile(
    r"NET/Plugin ?: ?(?:dlerror=.*No plugin found|No plugin found|Plugin load (?:\(\S*\) )?returned"
    r"|[Cc]ould not find:|Using internal (?:net|network) plugin"
    r"|Failed to find ncclNetPlugin symbol)"
)
# a plugin library that exists but cannot be loaded because a library it needs is missing:
# "NET/Plugin: libfabric.so.1: cannot open shared object file" (2.23-2.27), "NET/Plugin:
# libnccl-net-ofi.so: libfabric.so.1: cannot open ..." (2.28+), inside 2.18's "returned 2 : ..." line
_PLUGIN_DEP = re.compile(r"(?:^|[\s:])((?!libnccl-net)[\w.+-]+\.so[\w.]*): cannot open shared object file")
# every pattern runs in linear time on any line: no lazy group before `\s*$` or a literal (those retry
# from every position of a long run); names are cut with str.find/strip instead
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}")
# Channel 00/0 : 0[0] -> 1[1] [send] via NET/...   Ring 00 : 7 -> 8 [receive] via NET/...
_CHANNEL_FRONT = re.compile(
    r"(?:Channel|Ring) (\d+)(?:/(\d+))? : (-?\d+)(?:\[[0-9a-fA-Fx:.]*\])? -> (-?\d+)"
    r"(?:\[[0-9a-fA-Fx:.]*\])?(?: \[(send|receive)\])? via "
)
# a whole NET channel message with nothing after its tail: the two ranks it names, then its network name,
# proxy, /GDRDMA and (PCI) as the only groups (the front's other groups made non-capturing: captures cost),
# read as `channel_line` reads it, in one C match (analyze.prepare); any other message takes `channel_line`
NET_CHANNEL_CLEAN = re.sub(r"(?<!\\)\((?![?-])", "(?:", _CHANNEL_FRONT.pattern) + (
    r"NET/([^/]+)/\d+(?:\((-?\d+)\))?(/GDRDMA)?(\(PCI\))?(?:/Shared)?\Z"
)
_NET_TAIL = re.compile(
    r"(?P<name>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>-?\d+)\))?(?P<gdr>/GDRDMA)?(?P<pci>\(PCI\))?"
    r"(?P<shared>/Shared)?(?P<rest>.*)$"
)
_COMM = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) n[Rr]anks (\d+)(?: (?:cudaDev (\d+)|nNodes (\d+)))?")
# the first `busId <hex>` after _COMM's match (a literal search; a lazy `.*?` tried each position)
_BUSID = re.compile(r"busId ([0-9a-fA-F]+)")
_INIT_PHASE = re.compile(r"Init (COMPLETE|START)")
_SOCKET_IF = re.compile(r"NET/Socket : Using (.*)")
_IB_USING = re.compile(r"NET/IB ?: ?Using \[\d")
# PyTorch's c10d (torch/csrc/distributed/c10d/NCCLUtils.hpp) ends "NCCL error in: <file>:<line>, <error>,
# NCCL version <major>.<minor>.<patch>" with the version of the NCCL it loaded
_QUOTED_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_WATCHDOG = re.compile(r"[Ww]atchdog caught collective operation timeout: (WorkNCCL\([^)]*\))?")
# NCCL's return chain, one line per caller as an error passes up: `%s:%d -> %d` (NCCLCHECK,
# src/include/checks.h at v2.18.3-1), `%s:%d (%s) -> %d` (INFO_LOC, src/include/debug.h at 5067397c)
_RETURN = re.compile(r"[\w./-]+\.(?:cc|cu|h):\d+(?: \(\w+\))? -> (\d+)\s*$")
_TORCH_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]")
# nccl-tests src/common.h: printf("%s: Test NCCL failure %s:%d '%s / %s'\n", hostname, __FILE__,
# __LINE__, ...) (NCCL < 2.13: '%s' alone), "Test CUDA failure" likewise, and the relay
# " .. %s pid %d: Test failure %s:%d"
_TEST_FAILURES = (" Test NCCL failure ", " Test CUDA failure ", " Test failure ")
_FAIL_AT = re.compile(r"(\S+):(\d+)(?: '(.*)')?")
# Open MPI: "mpirun noticed that process rank 3 with PID 0 on node gpu-b exited on signal 11 (...)."
_MPI_SIGNAL = re.compile(
    r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?"
)
# Slurm: "srun: error: node-b: task 3: Segmentation fault (core dumped)", "...: tasks 0-7: Killed"
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")
_SRUN_CRASH = ("Segmentation fault", "Killed", "Aborted", "Bus error", "Floating point exception")
# errors that end a stalled or broken connection (a hang the timeout ended), not a crash of the process
_NETWORK_ERRORS = ("unhandled system error", "network error", "timed out", "remote error")
_ERROR_LINE = re.compile(
    r"NCCL error|NCCL failure|Cuda failure|unhandled (?:system|cuda) error|ncclSystemError|ncclInternalError"
    r"|ncclUnhandledCudaError|ncclRemoteError"
)


def _is_error_text(text: str) -> bool:
    """_ERROR_LINE is in `text`. Every one of its phrases holds 'rror' or 'failure': two substring tests
    spare the regex on almost every line (issue 15)."""
    return ("rror" in text or "failure" in text) and _ERROR_LINE.search(text) is not None


# Substrings that a line of interest must contain (the cheap prefilter before any regex). "Bootstrap": the
# first line every NCCL process prints (`Bootstrap : Using eth0:...`), read only to know its host, so that a
# host that printed nothing else is named and must show its own evidence (issue 23, item 1)
NEEDLES = (
    "NET",
    "WARN",
    "network",
    "ersion",
    " rank ",
    "atchdog",
    "error",
    "failure",
    "Direct RDMA",
    "Bootstrap",
)
# NCCL's return chain (`init.cc:1390 -> 3`, see _RETURN): looked for apart, as other programs' logs hold
# `.cc:` too (glog's `file.cc:142]`); such a line is read only where it also holds " -> " (analyze.prep_line).
# One needle, not `.h:` too: a short needle that starts with '.' costs the scan ~15 % each (issue 41, measured
# on the real logs); a chain that begins in a header is read from its first `.cc` line
CHAIN_NEEDLES = (".cc:",)


class Event:
    """One fact-bearing line. `key` is (host, pid) of the process, `dev` the device in its head."""

    __slots__ = (
        "kind",
        "host",
        "pid",
        "tid",
        "dev",
        "level",
        "lineno",
        "source",
        "file",
        "text",
        "data",
        "cut",
        "spliced",
    )

    def __init__(self, kind, head, lineno, source, file, text, data, cut=False, spliced=False):
        self.kind = kind
        self.cut = cut
        self.spliced = spliced  # began inside another rank's line: its host may carry that line's tail
        if head is None:
            self.host = self.pid = self.tid = self.dev = self.level = None
        else:
            self.host, self.pid, self.tid, self.dev, self.level = head
        self.lineno = lineno
        self.source = source
        self.file = file
        self.text = text
        self.data = data

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Event({self.kind} {self.host}:{self.pid} [{self.dev}] {self.data!r})"


def _driver(value: str) -> str:
    """CUDA encodes versions as 1000*major + 10*minor: 12080 -> '12.8'."""
    v = int(value)
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


def parse_line(line: str, lineno: int = 0, file: Optional[str] = None, source: Optional[str] = None):
    """Events for one raw line (prefixes are stripped here). Returns a list, often empty."""
    src, text = strip_prefix(line)
    return parse_text(text, lineno, file, source or src)


_PID_TID = re.compile(r"\d+")
_LEVELS = ("INFO", "WARN", "TRACE", "ABORT")
_LEVEL_SET = frozenset(_LEVELS)
_CACHE_MAX = 4096
# A head sits right before its level (`host:pid:tid [dev] NCCL INFO`), or before a WARN's source position
# (`host:pid:tid [dev] transport/net_ib.cc:1295 NCCL WARN`, `int f(t**):208 NCCL WARN`): it is looked for
# only this far before ` NCCL `, and at most this many ` [` from the right, so no line costs more than a
# bounded amount per ` NCCL ` it holds (the old regex search over the whole prefix was quadratic).
HEAD_WINDOW = 1024
_HEAD_TRIES = 4
SPLICES_MAX = 64  # heads read in one line; the rest of a line holding more is not parsed
_head_cache = {}  # type: Dict[str, object]
_msg_cache = {}  # type: Dict[str, object]
_via_cache = {}  # type: Dict[str, Dict[str, object]]
_HOST_STOP = frozenset(" \t\n\r\f\v[]|")


def _find_head(text: str, lo: int, hi: int):
    """(host, pid, tid, dev, start) of the `host:pid:tid [dev]` nearest before `hi` (at or after `lo`)."""
    j = hi
    for _ in range(_HEAD_TRIES):
        j = text.rfind(" [", lo, j)
        if j < 0:
            return None
        close = text.find("]", j + 2, hi)
        after = close + 1
        if close >= 0 and (after == hi or text[after] == " "):
            dev = text[j + 2 : close]
            if " " not in dev and "[" not in dev:
                b = j
                while b > lo and text[b - 1] not in _HOST_STOP:
                    b -= 1
                parts = text[b:j].rsplit(":", 3)
                if len(parts) >= 3 and _PID_TID.fullmatch(parts[-1]) and _PID_TID.fullmatch(parts[-2]):
                    host = parts[-3]
                    # an empty host (`:pid:tid [dev]`: host names cut before a log was shared) is a head
                    # when nothing stands before it; the host then stays unknown ("")
                    if host or len(parts) == 3:
                        start = j - len(parts[-1]) - len(parts[-2]) - len(host) - 2
                        return host, parts[-2], parts[-1], dev, start
    return None


def _split_head(text: str):
    """(head tuple, message, index where the head starts) or (None, text, -1).

    Looks for ` NCCL <LEVEL>` and reads `host:pid:tid [dev]` before it; the part before the
    level repeats for every line of a thread, so it is parsed once and cached.
    """
    start = 0
    while True:
        i = text.find(" NCCL ", start)
        if i < 0:
            return None, text, -1
        j = i + 6
        k = text.find(" ", j)
        if k < 0:
            k = len(text)
        lv = text[j:k]
        if lv in _LEVEL_SET:  # no level is a prefix of another: the word after NCCL must be one
            lo = max(0, i - HEAD_WINDOW)
            key = text[lo:k]
            h = _head_cache.get(key)
            if h is None:
                f = _find_head(text, lo, i)
                h = ((f[0], f[1], f[2], f[3], lv), f[4] - lo) if f else False
                if len(_head_cache) >= _CACHE_MAX:
                    _head_cache.clear()
                _head_cache[key] = h
            if h:
                return h[0], text[k + 1 :], h[1] + lo
        start = j


def parse_text(
    text: str, lineno: int, file: Optional[str], source: Optional[str], spliced: bool = False
) -> List[Event]:
    """Events for one prefix-stripped line.

    Two ranks writing into one pipe can splice lines (`...via NET/AWS Libfabz-2:2:6 [0] NCCL INFO ...`):
    a second NCCL head inside a message starts a new line, and the part before it is marked cut. At most
    SPLICES_MAX heads are read from one line (a loop, not recursion: any line is safe).
    """
    out = []  # type: List[Event]
    for _ in range(SPLICES_MAX):
        rest = _parse_one(text, lineno, file, source, spliced, out)
        if rest is None:
            break
        text, spliced = rest, True
    return out


def _parse_one(text: str, lineno: int, file, source, spliced: bool, out: List[Event]) -> Optional[str]:
    """Append the events of `text` up to a second NCCL head; return the text from that head, or None."""
    head = None
    msg = text
    cut = False
    rest = None
    if "NCCL " in text:
        head, msg, _ = _split_head(text)
        if head is not None and " NCCL " in msg:
            h2, _, at = _split_head(msg)
            if h2 is not None and at > 0:
                rest = msg[at:]
                msg = msg[:at]
                cut = True
    if head is None:
        ev = _classify_msg(text, None)
        if ev is not None:
            for kind, data in ev:
                out.append(Event(kind, None, lineno, source, file, text, data, cut, spliced))
        out.extend(_classify_plain(text, lineno, file, source))
    else:
        ev, err = classify(msg)
        for kind, data in ev:
            out.append(Event(kind, head, lineno, source, file, text, data, cut, spliced))
        if head[4] in ("WARN", "ABORT"):
            out.append(Event("warn", head, lineno, source, file, text, {"message": msg}, cut, spliced))
            i = msg.find("Cuda failure ")  # NCCL's CUDACHECK: "Cuda failure 'named symbol not found'"
            if i >= 0:
                what = msg[i : i + 200]
                crash = {"rank": _launcher_rank(source), "host": head[0], "what": what, "error": what}
                crash["kind"] = "crash"
                out.append(Event("crash", head, lineno, source, file, text, crash, cut, spliced))
        if err:
            out.append(Event("error", head, lineno, source, file, text, {"message": msg}, cut, spliced))
    return rest


def classify(msg: str) -> tuple:
    """Message of a headed line -> ([(kind, data)], is an error line), cached: the same message
    is printed by every rank, and by every new communicator (channel lines included).

    Channel lines that miss the cache still share their ` via ` tail's parse (see _channel_data).
    The returned data dicts are shared and must not be modified.
    """
    hit = _msg_cache.get(msg)
    if hit is None:
        ev = None
        if "via " in msg:
            m = _CHANNEL_FRONT.match(msg)
            if m:
                ev = [("channel", _channel_data(m, msg[m.end() :]))]
        if ev is None:
            ev = _classify_msg(msg, True)
        err = _is_error_text(msg)
        hit = (tuple(ev) if ev else (), err)
        if len(_msg_cache) >= _CACHE_MAX:
            _msg_cache.clear()
        _msg_cache[msg] = hit
    return hit


def _classify_msg(msg: str, head) -> Optional[List[tuple]]:
    if head is None:
        # old NCCL printf's the version without a head
        if msg.startswith("NCCL version "):
            m = _VERSION.match(msg)
            if m:
                return [("nccl_version", {"version": m.group(1), "cuda": m.group(2)})]
        # a line pasted without its `host:pid:tid [dev]` (or with only `[dev]`) still names provider, plugin,
        # network, NCCL's own Socket/IB transport and the NCCL version
        i = msg.find("NCCL INFO ")
        if i >= 0:
            msg = msg[i + 10 :]
        elif msg.startswith(_TEST_LOGGER):
            msg = _test_logger_message(msg)
        if msg.startswith(_HEADLESS_MESSAGES):
            return _classify_msg(msg, True)
        return None
    if msg.startswith("NET/OFI "):
        return _ofi(msg)
    if " -> " in msg:
        m = _RETURN.match(msg)
        if m:
            return [("return_chain", {"rc": int(m.group(1))})]
    if msg.startswith("Bootstrap"):  # names its process's host, nothing more
        return [("bootstrap", {})]
    if msg.startswith("NET/Plugin") or msg.startswith("Successfully loaded external"):
        m = _PLUGIN_LOADED.match(msg)
        if m:
            name, api = (m.group(1) or "").strip(), None
            if name.endswith(")") and " (v" in name:  # "Libfabric (v10)": the plugin API version
                name, _, api = name[:-1].rpartition(" (v")
            return [("plugin_loaded", {"name": name or m.group(2), "api": api})]
        if "cannot open shared object" in msg:
            d = _PLUGIN_DEP.search(msg)
            if d:
                return [("plugin_load_failed", {"message": msg}), ("plugin_dep_missing", {"lib": d.group(1)})]
        if _PLUGIN_FAILED.match(msg):
            return [("plugin_load_failed", {"message": msg})]
        return None
    if msg.startswith("NCCL version "):
        m = _VERSION.match(msg)
        if m:
            return [("nccl_version", {"version": m.group(1), "cuda": m.group(2)})]
    if msg.startswith("cudaDriverVersion"):
        m = _DRIVER.match(msg)
        if m:
            return [("cuda_driver", {"version": _driver(m.group(1))})]
    if msg.startswith("Using network "):
        name = msg[14:].strip()
        if name:
            return [("network", {"name": name})]
    if "NET plugin" in msg:
        i = msg.find("Assigned NET plugin ")
        if i >= 0:
            j = msg.find(" to comm", i + 20)
            if j > i + 20:
                return [("network", {"name": msg[i + 20 : j]})]
        i = msg.find("Initialized NET plugin ")
        if i >= 0 and msg[i + 23 :].strip():
            return [("net_initialized", {"name": msg[i + 23 :].strip()})]
    if "rank " in msg:
        m = _COMM.search(msg)
        if m:
            p = _INIT_PHASE.search(msg)
            nl = msg.find("\n", m.end())
            bus = _BUSID.search(msg, m.end(), len(msg) if nl < 0 else nl)
            return [
                (
                    "comm",
                    {
                        "comm": m.group(1),
                        "rank": int(m.group(2)),
                        "nranks": int(m.group(3)),
                        "cudadev": m.group(4),
                        "nnodes": int(m.group(5)) if m.group(5) else None,
                        "busid": bus and bus.group(1),
                        "phase": p.group(1) if p else None,
                    },
                )
            ]
    if msg.startswith("NET/Socket : Using"):
        m = _SOCKET_IF.match(msg)
        return [("socket_if", {"interfaces": m.group(1) if m else None})]
    if msg.startswith("External network plugin ") and msg.endswith(" is unsupported"):
        return [("plugin_load_failed", {"message": msg})]  # NCCL >= 2.28 src/plugin/net.cc
    if msg.startswith(("Failed to initialize NET plugin", "Failed to initialize any NET plugin")):
        # NCCL >= 2.28 src/plugin/net.cc: external plugins are tried first and the loop stops at the first
        # one assigned, so any of these lines means the external (aws-ofi-nccl) plugin is not in use
        return [("plugin_net_init_failed", {"message": msg})]
    if "GPU Direct RDMA Enabled" in msg:
        m = _GDR_ENABLED.search(msg)
        if m:
            return [("gdr_enabled", {"read": int(m.group(1))})]
    if msg.startswith("NET/IB"):
        if _GDR_DISABLED.search(msg):
            return [("gdr_disabled", {"message": msg})]
        if _IB_USING.match(msg):
            # NCCL's own IB transport found devices (src/transport/net_ib.cc "NET/IB : Using"): not EFA
            return [("internal_net", {"name": "IB"})]
        if "Got completion from peer" in msg:
            return [("ib_error", {"message": msg})]
        return [("ib", {"message": msg})]
    i = msg.find(" set by environment to ")
    if i > 0:
        before = msg[max(0, i - 256) : i].split()
        name = before[-1] if before else ""
        if _ENV_NAME.fullmatch(name):
            value = msg[i + 23 :].rstrip()
            return [("env", {"name": name, "value": value[:-1] if value.endswith(".") else value})]
    if _GDR_DISABLED.search(msg):
        return [("gdr_disabled", {"message": msg})]
    return None


# what a line without an NCCL head is read for (the rest needs the head: ranks, channels)
_HEADLESS_MESSAGES = (
    "NET/OFI ",
    "Using network ",
    "NET/Plugin",
    "NET/Socket : Using",
    "NET/IB",
    "NCCL version ",
)
# aws-ofi-nccl's own test programs print through their logger: "WARN: Function: <f> Line: <n>: NET/OFI ..."
# (tests/functional/functional_test.cpp; tests/test-common.h before 1.9)
_TEST_LOGGER = ("WARN: Function: ", "INFO: Function: ", "TRACE: Function: ")


def _test_logger_message(msg: str) -> str:
    """The message of a line from aws-ofi-nccl's test logger (what follows `Line: <n>: `), or the line."""
    j = msg.find(" Line: ")
    k = msg.find(": ", j + 7) if j >= 0 else -1
    return msg[k + 2 :] if k >= 0 else msg


def channel_tail(via: str) -> Dict[str, object]:
    """What follows a channel line's ` via ` (transport, net, gdr, ...), parsed once per distinct tail.
    The dict is shared and must not be modified."""
    tail = _via_cache.get(via)
    if tail is None:
        tail = _via(via)
        if len(_via_cache) >= _CACHE_MAX:
            _via_cache.clear()
        _via_cache[via] = tail
    return tail


def channel_line(msg: str) -> Optional[Dict[str, object]]:
    """The ` via ` tail of a headed message that `classify` reads as one channel event and not an
    error line, else None: the same answer without building the event (analyze.prepare's NET runs)."""
    m = _CHANNEL_FRONT.match(msg)
    if m is None:
        return None
    if _is_error_text(msg):
        return None
    return channel_tail(msg[m.end() :])


def channel_ranks(msg: str) -> Optional[Tuple[int, int]]:
    """The two ranks a channel message names (`Channel 00/0 : 3[1] -> 8[0] ...`: (3, 8)), None if it is none.
    Why: a rank number at or past the world's size is a line of another job (judge/world.py)."""
    m = _CHANNEL_FRONT.match(msg)
    return None if m is None else (int(m.group(3)), int(m.group(4)))


def clean_net_tail(
    name: str, proxy: Optional[str], gdr: Optional[str], pci: Optional[str]
) -> Optional[tuple]:
    """(net, gdr, proxy, pci) as `channel_tail` reads them, for the groups of a NET_CHANNEL_CLEAN match;
    None where `channel_line` would read no channel (an error line: only the name is free text)."""
    if _is_error_text(name):
        return None
    return name, gdr is not None, None if proxy is None else int(proxy), pci is not None


def _channel_data(m, via: str) -> Dict[str, object]:
    tail = channel_tail(via)
    data = {
        "channel": int(m.group(1)),
        "conn": m.group(2),
        "src": int(m.group(3)),
        "dst": int(m.group(4)),
        "dir": m.group(5),
    }  # type: Dict[str, object]
    data.update(tail)
    return data


def _via(via: str) -> Dict[str, object]:
    """What follows `via `: NET/<name>/<dev>[(proxy)][/GDRDMA][(PCI)][/Shared], or P2P/..., SHM/..."""
    if via.startswith("NET/") or via.startswith("COLLNET/") or via.strip() in ("NET", "COLLNET"):
        transport, _, tail = via.partition("/")
        t = _NET_TAIL.match(tail)
        if t is None:
            # cut before the device number: we saw a NET channel but not how it runs
            return dict(
                transport=transport.strip(),
                net=None,
                netdev=None,
                proxy=None,
                gdr=None,
                pci=False,
                shared=False,
            )
        clean = t.group("rest").strip() == ""
        return dict(
            transport=transport,
            net=t.group("name"),
            netdev=int(t.group("dev")),
            proxy=int(t.group("proxy")) if t.group("proxy") else None,
            gdr=True if t.group("gdr") else (False if clean else None),
            pci=bool(t.group("pci")),
            shared=bool(t.group("shared")),
        )
    return {"transport": via.split("/", 1)[0].strip() or None, "path": via.strip()}


def _ofi(msg: str) -> Optional[List[tuple]]:
    m = _OFI_PROVIDER.match(msg)
    if m:
        return [
            (
                "provider",
                {
                    "provider": m.group(1),
                    "fabric": m.group(2),
                    "nics": int(m.group(3)) if m.group(3) else None,
                },
            )
        ]
    m = _OFI_INIT.match(msg)
    if m:
        return [("plugin_init", {"name": m.group(1), "version": m.group(2)})]
    m = _OFI_LIBFABRIC.match(msg)
    if m:
        return [("libfabric_version", {"version": m.group(1)})]
    m = _OFI_CUDA.match(msg)
    if m:
        return [
            (
                "cuda_driver",
                {"version": _driver(m.group(1)), "runtime": _driver(m.group(2)) if m.group(2) else None},
            )
        ]
    m = _OFI_CUDA_RT.match(msg)
    if m:
        return [("cuda_runtime", {"version": _driver(m.group(1))})]
    m = _OFI_RUNNING_ON.match(msg)
    if m:
        return [("platform", {"name": m.group(1), "via": "running_on"}), ("ofi", {})]
    m = _OFI_TUNER_PLATFORM.match(msg)
    if m:
        return [("platform", {"name": m.group(1), "via": "tuner"})]
    m = _OFI_PLATFORM_SELECTED.match(msg)
    if m:
        return [("platform", {"name": m.group(1), "via": "selected"})]
    if _PLUGIN_INIT_FAILED.match(msg):
        return [("plugin_init_failed", {"message": msg})]
    if _GDR_DISABLED.search(msg):
        return [("gdr_disabled", {"message": msg})]
    m = _OFI_NDEV.match(msg)
    if m:
        return [("ofi_ndev", {"ndev": int(m.group(1))})]
    return [("ofi", {})]


def _classify_plain(text: str, lineno: int, file, source) -> List[Event]:
    """Lines without an NCCL head that still matter: torch watchdog, library errors."""
    out = []
    if "atchdog" in text:
        m = _WATCHDOG.search(text)
        if m:
            r = _TORCH_RANK.search(text)
            out.append(
                Event(
                    "watchdog",
                    None,
                    lineno,
                    source,
                    file,
                    text,
                    {"work": m.group(1), "rank": int(r.group(1)) if r else None},
                )
            )
    if "failure" in text or "exited on signal" in text or "srun: error" in text or "NCCL error in: " in text:
        crash = _crash(text, source)
        if crash is not None:
            version = crash.pop("nccl_version", None)
            out.append(Event("crash", None, lineno, source, file, text, crash))
            if version:  # PyTorch quotes the NCCL it runs: "..., NCCL version 2.21.5"
                out.append(Event("nccl_version", None, lineno, source, file, text, {"version": version}))
    if _is_error_text(text):
        out.append(Event("error", None, lineno, source, file, text, {"message": text}))
    return out


def _launcher_rank(source: Optional[str]) -> Optional[int]:
    """The rank a launcher tag names (`mpi:3`, `srun:3`, `torchrun:3`), or None."""
    if source and ":" in source:
        tail = source.rsplit(":", 1)[1]
        if tail.isdigit():
            return int(tail)
    return None


def _crash(text: str, source: Optional[str]) -> Optional[Dict[str, object]]:
    """A process that failed or died: {rank, host, what}. Found with str.find first (linear on any line)."""
    for marker in _TEST_FAILURES:
        i = text.find(marker)
        if i < 0:
            continue
        before = text[:i].rstrip(":").split()
        host = before[-1].rstrip(":") if before else None
        if marker == " Test failure " and len(before) >= 3 and before[-2] == "pid":
            host = before[-3]  # " .. host pid 123: Test failure common.cu:1160"
        m = _FAIL_AT.match(text, i + len(marker))
        where = "%s:%s" % (m.group(1), m.group(2)) if m else None
        error = m.group(3) if m and m.group(3) is not None else None
        what = marker.strip() + (" " + where if where else "") + (f" '{error}'" if error else "")
        kind = "network" if error and any(e in error for e in _NETWORK_ERRORS) else "crash"
        if marker == " Test failure ":
            kind = "relay"  # the failure passed up the stack: the line before it says what failed
        return {"rank": _launcher_rank(source), "host": host, "what": what, "error": error, "kind": kind}
    i = text.find("NCCL error in: ")
    if i >= 0:  # PyTorch c10d: "NCCL error in: <file>:<line>, <error>, NCCL version ..."
        rest = text[i + 15 :]
        error = rest.split(", ", 2)[1] if rest.count(", ") >= 1 else rest
        kind = "network" if any(e in error for e in _NETWORK_ERRORS) else "crash"
        r = _TORCH_RANK.search(text, 0, i)
        rank = int(r.group(1)) if r else _launcher_rank(source)
        quoted = _QUOTED_VERSION.search(rest)
        return {
            "nccl_version": quoted.group(1) if quoted else None,
            "rank": rank,
            "host": None,
            "what": "NCCL error: " + error[:200],
            "error": error,
            "kind": kind,
        }
    if "exited on signal" in text:
        m = _MPI_SIGNAL.search(text)
        if m:
            name = m.group(5)
            return {
                "rank": int(m.group(1)),
                "host": m.group(3),
                "what": "exited on signal %s%s" % (m.group(4), f" ({name})" if name else ""),
                "error": None,
                "kind": "crash",
            }
    if "srun: error" in text:
        m = _SRUN_TASK.search(text)
        what = m.group(3).strip() if m else ""
        if m and any(c in what for c in _SRUN_CRASH):
            task = m.group(2)
            return {
                "rank": int(task) if task.isdigit() else None,
                "host": m.group(1),
                "what": f"task {task}: {what}",
                "error": None,
                "kind": "crash",
            }
    return None
