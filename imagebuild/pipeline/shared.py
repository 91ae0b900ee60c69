"""What several stages share: the built variants asked for, the signer, a script's stdout line."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from efa_validators.report.printable import printable
from imagebuild.errors import UserError
from imagebuild.release.destinations import log


def select_built(summary: Dict[str, Any], names: Sequence[str], path: str) -> List[Dict[str, Any]]:
    """The built variants asked for; an unknown name is a user error, an unbuilt one is skipped loudly."""
    entries = summary["variants"]
    known = {e.get("variant") for e in entries}
    for name in names:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summary", file=path, key="--variant")
    built = []
    for e in entries:
        if names and e.get("variant") not in names:
            continue
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):  # skipped: up to date
            log(f"skip {e.get('variant')}: status {e.get('status')!r}, nothing to push")
            continue
        built.append(e)
    if not built:
        raise UserError("no built variant to push", file=path, hint="run `efa-image-build build` first")
    return built


def read_signing(key: str, matrix: str) -> Tuple[Any, Tuple[str, str]]:
    """The signer and the matrix (path, sha256), read before anything is pushed or attached."""
    from imagebuild.release.attest import load_signer
    from imagebuild.release.attestations import read_matrix

    return load_signer(key), read_matrix(matrix)


def print_fields(*fields: object) -> None:
    """One tab-separated stdout line a script reads (push, fan-in), each field `printable` (and its tab
    written `\\t`, as printable leaves tabs): a value from a job's files (a variant name in its summary.json)
    cannot put a control byte, a field or a line of its own there."""
    print("\t".join(printable(f).replace("\t", "\\t") for f in fields))
