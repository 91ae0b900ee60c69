"""`python -m efa_validators parse LOG...` and `python -m efa_validators explain LOG...`.

Exit codes (the contract): 0 pass, 1 fail, 2 bad input or usage, 3 unknown.
Inputs are checked before anything is read, and outputs are written only once the whole
report exists (temp file + rename), so a bad input never leaves a half-written report.
"""

import argparse
import os
import stat
import sys
from typing import List, Optional

from efa_validators.report import jsonout, outfile
from efa_validators.report.contract import EXIT_BY_VERDICT, EXIT_FAIL, EXIT_PASS, EXIT_UNKNOWN
from efa_validators.report.printable import printable


def _positive_int(text: str) -> int:
    """argparse names the flag ("argument --nodes: ..."); this says what was wrong with the value."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


_FABRIC_HELP = "the nodes' fabric (efa, slingshot, infiniband, omnipath, psm3): the provider is judged by it"
_WORKERS_HELP = "processes that scan a large log file (default: the CPUs allowed, at most 8; 1: one process)"


def register(sub) -> None:
    p = sub.add_parser(
        "parse",
        help="parse NCCL_DEBUG=INFO / nccl-tests output into a verdict and reports",
        description="Read NCCL_DEBUG=INFO and nccl-tests output (files, '-' for stdin, or nccl-tests -J "
        "JSON) and decide whether EFA and GPUDirect RDMA were in use on every rank. "
        "Exit 0 pass, 1 fail, 2 bad input, 3 unknown.",
    )
    p.add_argument(
        "logs", nargs="+", metavar="LOG", help="log file, nccl-tests -J JSON file, or '-' for stdin"
    )
    p.add_argument("--instance-type", metavar="T", help="judge NICs and bandwidth against this profile")
    p.add_argument(
        "--image",
        metavar="REF@sha256:D",
        help="the image the logs come from (recorded, with the lock it carries, for `efa-image-build release "
        "--require-preflight`)",
    )
    p.add_argument("--nodes", type=_positive_int, metavar="N", help="number of nodes in the run")
    p.add_argument("--fabric", metavar="NAME", help=_FABRIC_HELP)
    p.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-' for stdout)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML (one testcase per check)")
    p.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (CI step summary)")
    p.add_argument("--workers", type=_positive_int, metavar="N", help=_WORKERS_HELP)
    p.set_defaults(func=run_parse)

    e = sub.add_parser(
        "explain",
        help="name the known failure signatures in logs, with evidence and remedy",
        description="Match logs against the catalog of failure signatures. Exit 0 when none of "
        "severity error is found, 1 when one is, 2 on bad input.",
    )
    e.add_argument("logs", nargs="+", metavar="LOG")
    e.add_argument("--instance-type", metavar="T")
    e.add_argument("--nodes", type=_positive_int, metavar="N")
    e.add_argument("--fabric", metavar="NAME", help=_FABRIC_HELP)
    e.add_argument("--workers", type=_positive_int, metavar="N", help=_WORKERS_HELP)
    e.set_defaults(func=run_explain)


def _check_inputs(paths: List[str]) -> None:
    from efa_validators.cli import InputError

    if sum(1 for p in paths if p == "-") > 1:
        raise InputError("'-' (stdin) given more than once")
    for path in paths:
        if path == "-":
            continue
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, expected a log file")
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: not readable")
        special = special_file(path)
        if special:
            raise InputError(f"{path}: {special}, not a log file (a stream goes on stdin: `... | parse -`)")


_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file(path: str) -> Optional[str]:
    """What `path` is when it is no file to read ('a FIFO', 'a character device'...), else None.

    A named FIFO blocks open() until a writer comes, which may be never; /dev/zero never ends (build.py's
    imagebuild/safefile.py refuses both; validators cannot import it). The one pipe read is the one a shell
    hands over already open, `parse <(cmd)` (/dev/fd/N, whose link names `pipe:[...]`): its writer exists."""
    try:
        mode = os.stat(path).st_mode  # never blocks, not even on a FIFO
    except OSError:
        return None  # the open names the error
    if stat.S_ISFIFO(mode) and _open_pipe(path):
        return None
    return next((word for test, word in _SPECIAL if test(mode)), None)


def _open_pipe(path: str) -> bool:
    """Whether `path` leads, by symlinks, to an anonymous pipe (`/dev/fd/63` -> `pipe:[123]`)."""
    for _ in range(8):
        try:
            target = os.readlink(path)
        except OSError:
            return False
        if target.startswith("pipe:["):
            return True
        path = os.path.join(os.path.dirname(path), target)
    return False


def _check_outputs(args) -> None:
    from efa_validators.cli import InputError

    for flag in ("json", "junit", "markdown"):
        target = getattr(args, flag, None)
        if not target or target == "-":
            continue
        parent = os.path.dirname(os.path.abspath(target)) or "."
        if not os.path.isdir(parent):
            raise InputError(f"--{flag} {target}: directory {parent} does not exist")
        if os.path.isdir(target):
            raise InputError(f"--{flag} {target}: is a directory")


def _analyze(args) -> dict:
    from efa_validators.analyze import analyze_paths
    from efa_validators.cli import InputError
    from efa_validators.scan.progress import on_terminal

    _check_inputs(args.logs)
    if args.instance_type:
        from efa_validators.judge.profiles import unknown_instance_type

        problem = unknown_instance_type(args.instance_type)
        if problem:
            raise InputError(problem)
    fabric = getattr(args, "fabric", None)
    if fabric is not None:
        from efa_validators.judge.verdict import FABRICS

        if fabric not in FABRICS:
            raise InputError("--fabric %r: expected one of %s" % (fabric, ", ".join(sorted(FABRICS))))
    progress = on_terminal(sys.stderr)
    try:
        workers = getattr(args, "workers", None)
        return analyze_paths(args.logs, args.instance_type, args.nodes, workers, progress, fabric)
    except OSError as err:
        raise InputError("{}: {}".format(err.filename or "input", err.strerror or err)) from None
    except ValueError as err:  # nccl-tests JSON that is not that format (names file and key)
        raise InputError(str(err)) from None
    finally:
        if progress is not None:
            progress.close()


def run_parse(args) -> int:
    from efa_validators.analyze import collector_paused
    from efa_validators.judge.causes import lead_sentence
    from efa_validators.report.formats import metric_lines, to_junit, to_markdown

    _check_outputs(args)
    image = _image(args)
    with collector_paused():  # the report's writing too: it walks the whole report (see collector_paused)
        report = _analyze(args)
        if image and not report.get("replay"):
            from efa_validators.run import imagebind

            report["image"] = imagebind.binding(image)
        outputs = []
        if args.json:
            outputs.append((args.json, jsonout.document(report)))
        if args.junit:
            outputs.append((args.junit, to_junit(report)))
        if args.markdown:
            outputs.append((args.markdown, to_markdown(report)))
        for target, text in outputs:
            outfile.write(target, text)
    stream = sys.stderr if args.json == "-" else sys.stdout
    lead = lead_sentence(report.get("findings") or [])
    if lead:
        print(printable(lead), file=stream)
    for line in metric_lines(report):
        print(printable(line), file=stream)
    for c in report["checks"]:
        if c["status"] != "pass":
            print("check {}: {} - {}".format(c["name"], c["status"], printable(c["detail"])), file=stream)
    print(check_counts(report["checks"]), file=stream)
    return EXIT_BY_VERDICT.get(report["verdict"], EXIT_UNKNOWN)


def check_counts(checks: List[dict]) -> str:
    """The last line: how many checks passed, failed and were unknown (the passes are not listed above)."""
    n = {s: sum(1 for c in checks if c["status"] == s) for s in ("pass", "fail", "unknown", "skip")}
    line = "checks: {} passed, {} failed, {} unknown".format(n["pass"], n["fail"], n["unknown"])
    return line + (", {} skipped".format(n["skip"]) if n["skip"] else "")


def _image(args) -> Optional[str]:
    """The --image reference, checked before anything is read (a tag names no one image)."""
    if not getattr(args, "image", None):
        return None
    from efa_validators.cli import InputError
    from efa_validators.run import imagebind

    try:
        return imagebind.parse_image_ref(args.image)
    except ValueError as err:
        raise InputError("--image: %s" % err) from None


def run_explain(args) -> int:
    """The findings cause first (efa_validators.judge.causes), led by the root cause and its remedy; each
    consequence prints the chain from its root cause."""
    from efa_validators.judge.causes import chain, lead_sentence

    report = _analyze(args)
    findings = report["findings"]
    out = sys.stdout
    if not findings:
        print("no known failure signature found (verdict: {})".format(report["verdict"]), file=out)
    lead = lead_sentence(findings)
    if lead:
        print(printable(lead), file=out)
    for f in findings:
        print("[{}] {}: {}".format(f["severity"], f["id"], printable(f.get("title"))), file=out)
        if f.get("caused_by"):
            print("    chain: {}".format(" -> ".join(chain(findings, f["id"]))), file=out)
        if f.get("message"):
            print("    {}".format(printable(f["message"])), file=out)
        for e in (f.get("evidence") or [])[:5]:
            print("    {}:{}: {}".format(printable(e.get("file")), e.get("line"), printable(e.get("text"))),
                  file=out)  # fmt: skip
        if f.get("remedy"):
            print("    remedy: {}".format(printable(f["remedy"])), file=out)
        if f.get("source"):
            print("    source: {}".format(f["source"]), file=out)
    print(
        "efa={} gdr={} verdict={}".format(_s(report["efa"]), _s(report["gdr"]), report["verdict"]), file=out
    )
    return EXIT_FAIL if any(f.get("severity") == "error" for f in findings) else EXIT_PASS


def _s(v) -> str:
    return "null" if v is None else ("true" if v is True else "false" if v is False else str(v))
