"""`python -m efa_validators VERB ...`: dispatches to one module per group of verbs.

Exit codes (a contract CI pipelines rely on): 0 pass, 1 fail, 2 bad input or usage, 3 unknown.
Each module listed exposes `register(subparsers)`; the parser's `func(args)` returns the exit code.
"""

import argparse
import importlib
import os
import sys

from efa_validators.report.contract import EXIT_USAGE

VERB_MODULES = {
    "efa_validators.cmd_parse": ("parse", "explain"),
    "efa_validators.cmd_preflight": ("node-check", "run", "drain"),
}


class InputError(Exception):
    """Bad input (missing file, bad flag value): printed without a traceback, exit 2."""


def make_parser(verb: str = ""):
    """The parser for every verb, or only for `verb`'s module when it names one.

    Why: `parse` is run inside jobs and over thousands of small logs; importing the pre-flight runner's
    modules for it cost a third of a small parse (~40 ms)."""
    parser = argparse.ArgumentParser(prog="python -m efa_validators", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    mine = [name for name, verbs in VERB_MODULES.items() if verb in verbs]
    for name in mine or VERB_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser(argv[0] if argv else "")
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as err:
        print("error: %s" % err, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def entry():
    """`python -m efa_validators`: main, then the final flush, where `| head` shows up as a broken pipe."""
    return flushed(main)


def flushed(run) -> int:
    """run(), then the final flush; a reader that went away (`| head`) ends it quietly with 141 (128 +
    SIGPIPE, as `cat` does), not with a traceback. Both CLIs end this way."""
    try:
        rc = run()
        sys.stdout.flush()
    except BrokenPipeError:
        return quiet_broken_pipe()
    return rc


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (`| head`): end quietly, as `cat` does, with 141 (128 + SIGPIPE).

    stdout is pointed at /dev/null so the interpreter's final flush cannot raise a second time.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141
