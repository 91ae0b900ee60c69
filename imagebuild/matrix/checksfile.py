"""`checks_file:`: the team's own checks kept in a YAML file beside the matrix, merged under the matrix's.

Why a file of its own: a team reviews its checks apart from the build matrix, and several matrices share one
file. Its lines travel with its values (yamlsrc), so a bad check there is reported as `checks.yaml:7: key
'checks.x.exit_code'`, also after the merge. The matrix's own `checks:` win by name (a `null` drops one).
"""

from __future__ import annotations

import os
import posixpath
from typing import Dict, Optional

from imagebuild.errors import UserError
from imagebuild.matrix import schema
from imagebuild.matrix.validate import validate
from imagebuild.matrix.yamlsrc import MDict, copy_dict, load_file, where
from imagebuild.safefile import within


def _refuse(body: MDict, file: str, message: str, hint: Optional[str] = None) -> UserError:
    return UserError(message, key="checks_file", hint=hint, **where(body, ["checks_file"], file))


def checks_layer(body: MDict, matrix_path: str, display: str, cache: Dict[str, MDict]) -> Optional[MDict]:
    """The lowest patch of a variant whose merged `body` names a `checks_file`: that file's `checks:`
    (parsed once per matrix in `cache`); None without one. Lowest, so the matrix's own checks win by name
    and `name: null` drops one of its."""
    rel = body.get("checks_file")
    if not isinstance(rel, str):
        return None  # absent, or a type error the schema reports with its line
    norm = posixpath.normpath(rel)
    if norm == ".." or norm.startswith("../") or norm.startswith("/"):
        raise _refuse(body, display, f"checks_file {rel!r} leaves the matrix's folder")
    folder = os.path.dirname(os.path.abspath(matrix_path))
    path = os.path.join(folder, norm)
    if not os.path.isfile(path):
        raise _refuse(body, display, f"checks_file {rel!r} is not a file next to the matrix")
    if not within(path, folder):  # a symlink out: its checks would go into the lock and the image's label
        raise _refuse(body, display, f"checks_file {rel!r} leaves the matrix's folder through a symlink")
    if path not in cache:
        shown = os.path.join(os.path.dirname(display), norm)
        root = load_file(path, shown)
        if not isinstance(root, MDict):
            raise UserError("a checks file is a mapping with a `checks:` mapping", file=shown, line=1)
        validate(schema.ChecksFile, root, root, shown)
        cache[path] = root
    return copy_dict(cache[path], ["checks"])
