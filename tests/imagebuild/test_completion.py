"""`efa-image-build completion SHELL` (issue 30, item 5): each printed script is loaded into the real shell
and asked to complete real verbs, options and choices, so a script that loads but completes nothing fails.

bash: the completion function `complete -p` names, called with COMP_WORDS/COMP_CWORD as readline calls it.
fish: `complete -C`, its own query. zsh and tcsh complete only inside their line editor, so they are driven
through a pseudo-terminal: a line is typed with TAB and Enter, and the command it ran (a shell function or
alias named efa-image-build) records its arguments. The shells come from Debian's packages
(scripts/setup-host.sh installs them; CI fails where one is missing).
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest
from cli import build_py
from conftest import needed
from paths import IMPORT_PATH, ROOT

from imagebuild.cli import COMMAND_NAMES, PROG
from imagebuild.commands.completion import SHELLS

RE_VERBS = sorted(v for v in COMMAND_NAMES if v.startswith("re"))  # render, release, report


def _script(shell: str, folder: Path, name: str) -> Path:
    res = build_py("completion", shell)
    assert res.rc == 0, res.err
    path = folder / name
    path.write_text(res.out)
    return path


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        needed(name, f"apt install {name}")
    return path


def _env(home: Path) -> dict:
    """A bare environment: no user rc files, config or history read or written outside `home`."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "TERM": "xterm",
        "LANG": "C.UTF-8",
    }


def _bash_asks(
    folder: Path, lines: List[str], env: dict, timeout: int = 60, cwd: Optional[Path] = None
) -> subprocess.CompletedProcess:
    """Write the bash completion script into `folder` and run `lines` in a bare bash that sourced it; there
    `ask WORD...` prints what TAB offers after those words (one a line), then `---`."""
    script = _script("bash", folder, "efa-image-build.bash")
    asks = folder / "ask.sh"
    asks.write_text(
        f"source {script}\n"
        f"fn=$(complete -p {PROG} | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n"
        '[ -n "$fn" ] || { echo "no completion function" >&2; exit 3; }\n'
        "ask() {\n"
        '  COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}\n'
        "  COMPREPLY=()\n"
        '  "$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        "  printf '%s\\n' \"${COMPREPLY[@]}\"; echo ---\n"
        "}\n" + "".join(line + "\n" for line in lines)
    )
    return subprocess.run(
        [_shell("bash"), "--norc", "--noprofile", str(asks)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def _answers(stdout: str) -> List[List[str]]:
    """Each `ask`'s offers, sorted."""
    return [sorted(a.split()) for a in stdout.split("---\n")[:-1]]


def test_bash_completes_verbs_options_and_choices(tmp_path):
    ask = f"ask {PROG}"
    asks = [f"{ask} re", f"{ask} render --mat", f"{ask} completion ''", f"{ask} --log-level ''"]
    proc = _bash_asks(tmp_path, asks, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    answers = _answers(proc.stdout)
    levels = ["debug", "error", "info", "warning"]
    assert answers == [RE_VERBS, ["--matrix"], sorted(SHELLS), levels], proc.stdout


def test_fish_completes_verbs_options_and_choices(tmp_path):
    script = _script("fish", tmp_path, "efa-image-build.fish")

    def ask(line: str) -> List[str]:
        proc = subprocess.run(
            [_shell("fish"), "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr
        return sorted(row.split("\t", 1)[0] for row in proc.stdout.splitlines())

    assert ask(f"{PROG} re") == RE_VERBS
    assert ask(f"{PROG} render --mat") == ["--matrix"]
    assert ask(f"{PROG} completion ") == sorted(SHELLS)


def _typed(argv: List[str], setup: List[str], lines: List[str], record: Path, env: dict) -> List[str]:
    """Start the shell on a pseudo-terminal (its controlling terminal, so its line editor runs), run `setup`,
    then type each of `lines` (TAB completes, Enter runs it); the arguments each run recorded, one a line.
    Each line is typed once the previous one has been recorded, so no typeahead is lost."""
    master, slave = pty.openpty()
    # setsid --ctty (util-linux): a new session whose controlling terminal is the pty (no preexec_fn, which
    # is unsafe in a process with threads)
    proc = subprocess.Popen(
        [_shell("setsid"), "--ctty", *argv], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    seen = bytearray()

    def read_until(count: int, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if record.exists() and len(record.read_text().splitlines()) >= count:
                return
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    seen.extend(os.read(master, 65536))
                except OSError:
                    return

    try:
        read_until(0, 1.0)  # the first prompt
        for text in setup:
            os.write(master, text.encode())
        os.write(master, f"{PROG} ready\n".encode())
        for n, line in enumerate(["", *lines], start=1):
            if line:
                os.write(master, line.encode())
            read_until(n, 30.0)
            got = record.read_text().splitlines() if record.exists() else []
            assert len(got) >= n, (
                f"{argv[0]}: nothing ran for {line!r}; the terminal showed:\n{seen.decode(errors='replace')}"
            )
        os.write(master, b"exit\n")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return record.read_text().splitlines()[1:]


# Lines typed with TAB after a prefix only one completion fits: a verb, a verb with a dash, a verb's option,
# a choice; what ran must be the completed line.
TYPED = [
    f"{PROG} rend\t\n",
    f"{PROG} inspect-\t\n",
    f"{PROG} render --matr\t x\n",
    f"{PROG} completion fi\t\n",
]
COMPLETED = ["render", "inspect-base", "render --matrix x", "completion fish"]


def test_zsh_completes_verbs_options_and_choices_on_its_fpath(tmp_path):
    """Installed as docs/build.md says: `_efa-image-build` in a folder on $fpath, then compinit."""
    folder = tmp_path / "site-functions"
    folder.mkdir()
    _script("zsh", folder, f"_{PROG}")
    record = tmp_path / "ran"
    setup = [
        f"fpath=({folder} $fpath); autoload -Uz compinit; compinit -u -D\n",
        f'{PROG}() {{ print -r -- "$*" >> {record} }}\n',
    ]
    got = _typed([_shell("zsh"), "-f", "-i"], setup, TYPED, record, _env(tmp_path))
    assert got == COMPLETED


def test_tcsh_completes_verbs_options_and_choices(tmp_path):
    script = _script("tcsh", tmp_path, "efa-image-build.tcsh")
    record = tmp_path / "ran"
    setup = [f"set edit; source {script}\n", f"alias {PROG} 'echo \\!* >> {record}'\n"]
    got = _typed([_shell("tcsh"), "-f", "-i"], setup, TYPED, record, _env(tmp_path))
    assert got == COMPLETED


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish", "tcsh", "powershell"])
def test_each_script_names_every_verb(shell):
    res = build_py("completion", shell)
    assert res.rc == 0 and all(verb in res.out for verb in COMMAND_NAMES), res.err


def test_an_unknown_shell_is_exit_2():
    res = build_py("completion", "ksh")
    assert res.rc == 2 and "ksh" in res.err


VARIANTS_MATRIX = """\
format: efa-image-build/matrix/v1
variants:
  - name: {first}
    base: {{image: localbase/debian:bookworm-minbase, kind: local, os: debian12}}
    tags: ["team/app:{{name}}-{{content_hash}}"]
  - name: {second}
    base: {{image: localbase/debian:bookworm-minbase, kind: local, os: debian12}}
    tags: ["team/app:{{name}}-{{content_hash}}"]
"""


def test_bash_completes_the_variant_names_of_the_matrix_the_project_config_names(tmp_path):
    """Issue 42 item 4: `--variant` completed nothing. The matrix is the one [tool.efa-image-build] names (not
    ./matrix.yaml); a matrix that cannot be read completes nothing and prints nothing (no traceback)."""
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / "images").mkdir()
    (project / "pyproject.toml").write_text('[tool.efa-image-build]\nmatrix = "images/matrix.yaml"\n')
    matrix = project / "images" / "matrix.yaml"
    matrix.write_text(VARIANTS_MATRIX.format(first="train-cu12", second="train-cu13"))
    (project / "matrix.yaml").write_text(VARIANTS_MATRIX.format(first="not-this", second="nor-this"))
    bin_dir = tmp_path / "bin"  # the console script, as an installed wheel puts it on PATH
    bin_dir.mkdir()
    (bin_dir / PROG).write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "build.py"} "$@"\n')
    (bin_dir / PROG).chmod(0o755)
    ask_build = f"ask {PROG} build --variant ''"
    asks = [
        ask_build,
        f"ask {PROG} list --variant train-cu1",
        f"printf 'variants: [{{name: x, base: 1}}]\\n' > {matrix}",
        ask_build,
        f"printf '[tool.efa-image-build\\n' > {project / 'pyproject.toml'}",
        ask_build,
    ]
    env = _env(tmp_path)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["PYTHONPATH"] = IMPORT_PATH
    proc = _bash_asks(tmp_path, asks, env, timeout=120, cwd=project)
    assert proc.returncode == 0, proc.stderr
    answers = _answers(proc.stdout)
    assert answers == [["train-cu12", "train-cu13"], ["train-cu12", "train-cu13"], [], []], proc.stdout
    assert proc.stderr == ""


def test_variant_names_are_bounded_and_quiet_on_a_bad_matrix(tmp_path):
    from imagebuild.commands.completion import variant_names

    (tmp_path / ".git").mkdir()
    assert variant_names(tmp_path, {}) == []  # no matrix
    (tmp_path / "matrix.yaml").write_text("a: &a [*a]\n")  # a recursive alias
    assert variant_names(tmp_path, {}) == []
    (tmp_path / "matrix.yaml").write_text(VARIANTS_MATRIX.format(first="one", second="two"))
    assert variant_names(tmp_path, {}) == ["one", "two"]
