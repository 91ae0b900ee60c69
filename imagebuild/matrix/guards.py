"""Load-time refusals of matrix values that the schema's patterns let through but that would do harm later.

Why here and not in the templates: what reaches a Dockerfile must already be safe, so the checks sit where
the file and line are still known (exit 2 naming them), and the templates stay free of defensive logic.
- the matrix file's own name is written into a Dockerfile comment: a line break in it would add an
  instruction;
- labels the tool sets (imagebuild.variant names each: the lock, the variant, the base's digest and image id,
  component versions, the OCI title, ...) cannot be set: the lock label is what `build.py test` and `release`
  trust, the base labels what a skipped rebuild reports; other `org.efa-image-build.*` keys stay free;
- an artifact's file name comes from its URL when not given: `https://host/` or `https://host/..` would
  name no file, or the artifacts folder's parent, in `COPY`;
- `training.source_dir` must stay inside the matrix's folder (the build context is what ships).
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from typing import Any, Optional

from imagebuild.errors import UserError
from imagebuild.matrix import schema
from imagebuild.matrix.yamlsrc import MDict, where
from imagebuild.variant import is_tool_label

SAFE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def check_file_name(file: str) -> None:
    """The matrix file's name goes into a Dockerfile comment: one printable line, nothing else."""
    name = os.path.basename(file)
    if not name.isprintable() or "\\" in name:
        raise UserError(
            f"the matrix file name {name!r} has a line break or control character",
            file=ascii(file),
            hint="rename the file (letters, digits, . _ -)",
        )


def url_file_name(url: str) -> str:
    """The last path segment of a URL (what an artifact is called when no filename is given)."""
    return posixpath.basename(urllib.parse.urlparse(url).path)


def refuse_hostile(spec: schema.VariantBody, body: MDict, file: str) -> None:
    """Refuse tool-owned labels, URLs that name no safe file, and a training folder outside the matrix's."""
    for key in spec.labels or {}:
        if is_tool_label(key):
            raise UserError(
                f"label '{key}' belongs to efa-image-build and cannot be set by the matrix",
                key=f"labels.{key}",
                hint="use your own prefix, e.g. com.example.team",
                **where(body, ["labels", key], file),
            )
    for cname, comp in (spec.components or {}).items():
        source = comp.source if comp is not None else None
        if source is None:
            continue
        for field in ("url", "signature_url", "key_url"):
            url: Optional[Any] = getattr(source, field)
            if url is None or (field == "url" and source.filename):
                continue
            name = url_file_name(url)
            if not SAFE_FILE.fullmatch(name) or name.strip(".") == "":
                loc = ["components", cname, "source", field]
                raise UserError(
                    f"the URL names no usable file name ({name!r}); artifacts are stored by file name",
                    key=".".join(loc),
                    hint="end the URL in the file's name, or give source.filename",
                    **where(body, loc, file),
                )
    if spec.training is not None and spec.training.source_dir:
        rel = posixpath.normpath(spec.training.source_dir)
        if rel == ".." or rel.startswith("../") or rel.startswith("/"):
            loc = ["training", "source_dir"]
            raise UserError(
                f"training.source_dir {spec.training.source_dir!r} leaves the matrix's folder",
                key="training.source_dir",
                hint="the build context holds only files from inside the matrix's folder",
                **where(body, loc, file),
            )
