"""The one way tests call the two command lines: in-process (fast; the test sees the return code and what was
printed, without capsys) or as a whole process (for what only a real interpreter shows: signals, pipes, the
exit status of `python`, a hang bounded by a timeout)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional

from paths import IMPORT_PATH, ROOT

BUILD_PY: List[str] = [sys.executable, str(ROOT / "build.py")]
VALIDATORS: List[str] = [sys.executable, "-m", "efa_validators"]


class Result(NamedTuple):
    rc: int
    out: str
    err: str


def _in_process(main: Callable[[List[str]], int], argv: tuple, stdin: str) -> Result:
    """main(argv) with stdin/stdout/stderr swapped for buffers (with .buffer, as the real streams have);
    argparse's SystemExit becomes the return code, as it would be the process's exit status."""
    out, err = io.TextIOWrapper(io.BytesIO(), "utf-8"), io.TextIOWrapper(io.BytesIO(), "utf-8")
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), "utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdin = old_stdin
    return Result(int(rc or 0), _text(out), _text(err))


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]


def build_py(*argv: object, stdin: str = "") -> Result:
    """`build.py ARGV` in this process (imagebuild.cli.main)."""
    from imagebuild.cli import main

    return _in_process(main, argv, stdin)


def validators(*argv: object, stdin: str = "") -> Result:
    """`python -m efa_validators ARGV` in this process (efa_validators.cli.main)."""
    from efa_validators.cli import main

    return _in_process(main, argv, stdin)


def _process(
    command: List[str], argv: tuple, timeout: Optional[float], kw: dict
) -> subprocess.CompletedProcess:
    """Run to the end in a child, bounded in time; from the project root with the project importable, text
    output captured, unless the caller says otherwise (any subprocess.run keyword)."""
    env = dict(kw.pop("env", None) or os.environ)
    env["PYTHONPATH"] = IMPORT_PATH + os.pathsep + env.get("PYTHONPATH", "")
    kw.setdefault("cwd", str(ROOT))
    kw.setdefault("text", True)
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    return subprocess.run([*command, *(str(a) for a in argv)], env=env, timeout=timeout, **kw)


def build_py_process(*argv: object, timeout: Optional[float] = 120, **kw) -> subprocess.CompletedProcess:
    """`python build.py ARGV` as a user runs it."""
    return _process(BUILD_PY, argv, timeout, kw)


def validators_process(*argv: object, timeout: Optional[float] = 120, **kw) -> subprocess.CompletedProcess:
    """`python -m efa_validators ARGV` as a user runs it."""
    return _process(VALIDATORS, argv, timeout, kw)


def installed_process(
    bin_dir: Path, *argv: object, timeout: Optional[float] = 120, **kw
) -> subprocess.CompletedProcess:
    """`efa-image-build ARGV` as the console script of an installed wheel (`bin_dir` of its venv) runs: no
    PYTHONPATH (nothing of this checkout is importable), from the caller's `cwd`, text output captured."""
    env = {k: v for k, v in (kw.pop("env", None) or os.environ).items() if k != "PYTHONPATH"}
    kw.setdefault("text", True)
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    command = [str(Path(bin_dir) / "efa-image-build"), *(str(a) for a in argv)]
    return subprocess.run(command, env=env, timeout=timeout, **kw)
