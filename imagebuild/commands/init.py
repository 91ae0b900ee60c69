"""`build.py init`: a starter matrix, checks file and CI workflow for a team's own repository.

The tool is installed (`pip install efa-image-build`), not forked: `init` gives an empty repository what the
other verbs read. It never overwrites: if any of its files exists (or a folder on the way is a link out of
the target), it writes nothing and exits 2 naming it. Everything is checked before the first write, and a
write that fails after all (a full disk) removes what init wrote and made: a refusal leaves the disk as it
was.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Dict, List

from imagebuild.commands import add_verb
from imagebuild.errors import UserError

WORKFLOW = ".github/workflows/images.yml"  # where GitHub Actions reads a workflow

# One variant that builds on any machine with docker and PyPI: the local debootstrap base (`efa-image-build
# base`), Debian's libfabric and Open MPI, NCCL and the CUDA runtime from NVIDIA's wheels. The pins are
# matrix.local.yaml's (tests/imagebuild/test_init.py holds them equal).
STARTER_MATRIX = """\
# The build matrix (docs: docs/matrix.md of efa-image-build; `efa-image-build schema` prints its JSON Schema).
# One variant that builds here, on no GPU and no AWS account: run `efa-image-build base` once as root (it
# makes the local Debian base with debootstrap), then `efa-image-build build` and `efa-image-build test`.
# For your cluster, add variants on a DLC or CUDA base (docs/matrix.md, "Variant body"). Paths are relative to
# this file.
format: efa-image-build/matrix/v1

defaults:
  base:
    image: localbase/debian:bookworm-minbase   # made by `efa-image-build base` (debootstrap, no registry)
    kind: local
    os: debian12
    python: /usr/bin/python3
  cuda: "12.8"
  packages:
    - ca-certificates=20230311+deb12u1
    - python3=3.11.2-1+b1
    - rdma-core=44.0-2
    - ibverbs-providers=44.0-2
    - libhwloc15=2.9.0-1
  components:
    libfabric:
      version: "1.17.0"
      source:
        apt: [libfabric1=1.17.0-3, libfabric-bin=1.17.0-3]
        apt_dev: [libfabric-dev=1.17.0-3]
    openmpi:
      version: "4.1.4"
      source:
        apt: [openmpi-bin=4.1.4-3+b1, libopenmpi3=4.1.4-3+b1]
        apt_dev: [libopenmpi-dev=4.1.4-3+b1]
    cuda_runtime:
      version: "12.8.90"
      method: wheel        # pinned with its sha256 by the tool's catalog
    nccl:
      version: "2.27.7"
      method: wheel
  # Your training code, copied to /opt/ml/code (requirements installed in a layer of their own):
  # training:
  #   source_dir: training
  #   entry_point: train.py
  #   requirements: requirements.txt
  # Images are tagged efa-image-build/<variant>:<versions>-<content hash> unless you name repositories:
  # tags: ["my-team/training:{name}-{content_hash}"]
  # One repository per variant (the default) takes plain channels (channels: [dev]); variants sharing one
  # repository, as in the line above, need the variant in every moving tag: channels: ["dev-{name}"] and
  # `release --tag "{variant}-..."` (docs/in-your-repository.md, "Repository layouts").

variants:
  - name: debian-nccl{nccl}
    description: Debian 12 with libfabric 1.17, Open MPI 4.1 and NCCL from the wheel (no EFA device)
    checks_file: checks.yaml   # your own image checks, beside the derived ones
    axes:
      nccl:
        "2.27": {}
"""

STARTER_CHECKS = """\
# Your own image checks (`checks_file: checks.yaml` in matrix.yaml), run by `efa-image-build test` beside the
# checks derived from each variant's lock, as custom:<name>. Exactly one of command, path, metadata says a
# check's kind (docs/matrix.md, "Your own checks").
checks:
  validators-run:
    description: the pre-flight the image carries starts (python -m efa_validators)
    command: python3
    args: [-m, efa_validators, --help]
    expected_output: [node-check]
  python-is-debian:
    description: the interpreter the variant names is the one in the image
    path: /usr/bin/python3
"""


def register(sub) -> None:
    p = add_verb(
        sub,
        "init",
        f"Write matrix.yaml (one variant that builds here), checks.yaml and the GitHub Actions "
        f"workflow {WORKFLOW} (the tool's examples/ci/github-actions.yml) into DIR. Nothing is "
        "overwritten: if one of them exists, nothing is written and the exit status is 2.",
    )
    p.add_argument("dir", nargs="?", default=".", metavar="DIR", help="the repository (default: here)")
    p.set_defaults(func=run)


def starter_files() -> Dict[str, bytes]:
    """What `init` writes, by path relative to the repository."""
    from imagebuild.render import shipped

    workflow = shipped.ci_examples() / "github-actions.yml"
    return {
        "matrix.yaml": STARTER_MATRIX.encode(),
        "checks.yaml": STARTER_CHECKS.encode(),
        WORKFLOW: workflow.read_bytes(),
    }


def plan(top: Path, files: Dict[str, bytes]) -> List[Path]:
    """Every check `init` makes, before it writes anything: `top` is a folder or not there yet (under a
    folder that can be written), every target is new, and every folder on its way is a plain folder inside
    `top` or not there yet. Returns the folders to make, outermost first. Pure but for looking at the disk."""
    if os.path.lexists(top) and not top.is_dir():
        raise UserError("is not a folder", file=str(top), key="DIR")
    folders: List[Path] = []
    above = top
    while not os.path.lexists(above):  # DIR and the folders above it that init makes
        folders.insert(0, above)
        above = above.parent
    if not above.is_dir():
        raise UserError("is not a folder", file=str(above), key="DIR", hint="init makes DIR inside a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UserError("cannot be written", file=str(above), key="DIR")
    real_top = top.resolve()
    for rel in files:
        target = top / rel
        if os.path.lexists(target):
            raise UserError(
                "already exists: init never overwrites a file",
                file=str(target),
                key="init",
                hint="move it away, or run init in an empty folder",
            )
        for parent in reversed(list(target.relative_to(top).parents)[:-1]):
            folder = top / parent
            if os.path.islink(folder) or (os.path.lexists(folder) and not folder.is_dir()):
                raise UserError(
                    "is a link or a file where init makes a folder",
                    file=str(folder),
                    key="init",
                    hint="init writes only plain folders inside the repository",
                )
            if not os.path.lexists(folder) and folder not in folders:
                folders.append(folder)
        if real_top not in target.parent.resolve().parents and target.parent.resolve() != real_top:
            raise UserError("leaves the repository", file=str(target), key="init")
    return folders


def write(top: Path, files: Dict[str, bytes]) -> List[Path]:
    """Write `files` under `top` once `plan` found nothing to refuse: each folder made new, each file created
    new (O_EXCL: a file that appears meanwhile is not replaced). On any failure (one made meanwhile, a full
    disk, a file size limit) what was written and made is removed again: a refused init leaves the disk as it
    was, and says which path (exit 2)."""
    folders = plan(top, files)
    made: List[Path] = []
    written: List[Path] = []
    path = top
    try:
        for path in folders:
            path.mkdir()
            made.append(path)
        for rel, data in files.items():
            path = top / rel
            with open(path, "xb") as f:
                written.append(path)
                f.write(data)
    except FileExistsError as err:  # made between the check and the write: not ours, left alone
        _undo(written, made)
        raise UserError(
            "already exists: init never overwrites a file", file=err.filename or str(path), key="init"
        ) from None
    except OSError as err:
        _undo(written, made)
        raise UserError(
            f"cannot write: {err.strerror or err}; nothing written",
            file=err.filename or str(path),
            key="init",
        ) from None
    except BaseException:
        _undo(written, made)
        raise
    return written


def _undo(written: List[Path], made: List[Path]) -> None:
    """The files written and the folders made, removed again (innermost folder first)."""
    for path in written:
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


def run(args: argparse.Namespace) -> int:
    top = Path(args.dir)
    for path in write(top, starter_files()):
        print(f"wrote {path}")
    print('next: sudo "$(command -v efa-image-build)" base   # the local base the starter variant builds on')
    print("      efa-image-build build && efa-image-build test")
    return 0
