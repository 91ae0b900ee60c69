"""One rule for the names a release writes: a name is a release tag or a channel of a repository, forever.

Release tags never move; channels move on each promotion. If one name could be both, a release could
"already" hold a tag that a later `--channel` moves (or the reverse), and the promise that a release tag
never moves would be gone. So the role of a name is read from every release record of the repository
(every variant's, every release, not only the newest: a channel recorded once stays a channel), and a
release that gives a name the other role is refused before anything is written. The names themselves are
checked exactly (imagebuild/adapters/registry.py `check_tag`, a fullmatch: no trailing newline).

Pure functions, and one reader of the local records folder.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from imagebuild.errors import UserError

Roles = Tuple[Dict[str, str], Dict[str, str]]  # (release tags, channels): name -> the record that says so


def _where(record: Dict[str, Any]) -> str:
    return f"{record.get('variant')}'s release of {record.get('released_at')}"


def roles(records: Iterable[Dict[str, Any]], repository: str) -> Roles:
    """The release tags and the channels the records know in `repository` (`host/repo`), each with the first
    record (as `variant's release of TIME`) that gives it that role."""
    tags: Dict[str, str] = {}
    chans: Dict[str, str] = {}
    for rec in records:
        for repo in rec.get("repositories") or []:
            if isinstance(repo, dict) and repo.get("repository") == repository:
                for tag in repo.get("tags") or []:
                    tags.setdefault(str(tag), _where(rec))
        for chan in rec.get("channels") or []:
            if isinstance(chan, dict) and chan.get("repository") == repository and chan.get("tag"):
                chans.setdefault(str(chan["tag"]), _where(rec))
    return tags, chans


def role_refusals(
    repository: str, tags: Sequence[str], channels: Sequence[str], records: Iterable[Dict[str, Any]]
) -> List[str]:
    """Why this release may not write `tags` as release tags and `channels` as channels in `repository`,
    given every record of it (empty: it may)."""
    known_tags, known_chans = roles(list(records), repository)
    out = []
    for tag in tags:
        if tag in known_chans:
            out.append(
                f"{repository}:{tag} is a channel ({known_chans[tag]}); it cannot become a release tag: "
                "a name is a channel or a release tag of a repository forever (choose another tag)"
            )
    for chan in channels:
        if chan in known_tags:
            out.append(
                f"{repository}:{chan} is a release tag ({known_tags[chan]}); release tags never move, so "
                "it cannot become a channel (choose another channel name)"
            )
    return out


# S3 keys under the records prefix: `<variant>/<name>.json` are records (a variant name starts with a letter
# or a digit: imagebuild/matrix/expand.py); what is not a record lives under a folder no variant can be named
LOCKS = ".locks"  # `<prefix>/.locks/<hash of host/repo>.json`: release locks (s3records.py)
INTENTS = ".intents"  # `<prefix>/.intents/<variant>.json`: an interrupted release's intent (transaction.py)
PENDING = "pending.json"  # the intent's name in a local variant folder (and in S3 before .intents/)
_VARIANT = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


def typed_record(doc: Any, where: str, intent: bool = False) -> Dict[str, Any]:
    """The one check every release record (`intent`: a pending release intent) passes, wherever it was read
    (a folder, S3, `latest.json`): a JSON object whose fields the readers use have their types, else exit 2
    naming where and the key. Why: `{"repositories": 5}` under the prefix was a TypeError in every later
    release, dry run included."""
    from imagebuild.building.documents import ReleaseIntent, ReleaseRecord
    from imagebuild.jsonfile import check_model

    what = "release intent" if intent else "release record"
    if not isinstance(doc, dict):
        raise UserError(f"not a {what}: expected a JSON object", file=where, key="--records")
    check_model(doc, ReleaseIntent if intent else ReleaseRecord, what, where)
    return doc


def parse_record(data: bytes, where: str, intent: bool = False) -> Dict[str, Any]:
    """`typed_record` of the bytes of one object (S3): not JSON is exit 2 naming it."""
    try:
        doc = json.loads(data)
    except ValueError as err:
        raise UserError(f"not JSON: {err}", file=where, key="--records") from None
    except RecursionError:  # nested deeper than Python's stack: a traceback before
        raise UserError("not a release record (nested too deep)", file=where, key="--records") from None
    return typed_record(doc, where, intent)


def s3_record_key(key: str, base: str) -> bool:
    """Whether S3 `key` is a release record: `<base><variant>/<name>.json`, never a lock, an intent (theirs
    are folders no variant can be named, and a `pending.json` of before them) or a deeper object."""
    parts = key[len(base) :].split("/") if key.startswith(base) else []
    return (
        len(parts) == 2
        and bool(_VARIANT.fullmatch(parts[0]))
        and parts[1].endswith(".json")
        and parts[1] != PENDING
    )


def read_local_records(root: Path, must_exist: bool) -> List[Dict[str, Any]]:
    """Every release record under `root` (`<variant>/*.json`). A record that cannot be read is bad input
    (exit 2): a name's role, or what a release names, would be guessed. With `must_exist`, so is a folder
    that is missing or cannot be listed (a typo must not read as "no release ever happened")."""
    if not root.is_dir() or not os.access(root, os.R_OK | os.X_OK):
        if not must_exist and not root.exists():
            return []
        why = "is not a folder" if root.exists() and not root.is_dir() else "cannot be read"
        why = "does not exist" if not root.exists() else why
        raise UserError(
            f"the release records folder {why}: nothing can be known about what the releases name",
            file=str(root),
            key="--records",
            hint="give the folder `efa-image-build release --records` wrote",
        )
    records = []
    paths = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:  # a variant's folder that cannot be listed hides its records: glob would skip it silently
            paths += sorted(p for p in folder.iterdir() if p.suffix == ".json")
        except OSError as err:
            raise UserError(
                f"cannot list these release records: {err.strerror}", file=str(folder), key="--records"
            ) from None
    from imagebuild.jsonfile import read_json

    for path in paths:
        # bounded and typed: a FIFO, a huge file, or a digest, channels or index of the wrong type is exit 2
        # naming the file and key (an interrupted release's intent, pending.json, has its own shape)
        doc = read_json(path, "release record", flag="--records")
        records.append(typed_record(doc, str(path), intent=path.name == PENDING))
    return records


def read_s3_records(s3: Any, bucket: str, prefix: str) -> List[Dict[str, Any]]:
    """Every release record under `s3://bucket/prefix/<variant>/*.json` (`s3_record_key`): on a runner whose
    local folder is fresh, the records a team shares. Each is read bounded and typed (`parse_record`); one
    deleted between the listing and its read is gone, not an error; anything else unreadable is exit 2."""
    from imagebuild.adapters.aws import aws_call
    from imagebuild.release.s3records import error_code
    from imagebuild.safefile import MAX_INPUT_BYTES

    base = f"{prefix}/" if prefix else ""
    where = f"s3://{bucket}/{base}"
    records: List[Dict[str, Any]] = []
    token: Dict[str, str] = {}
    try:
        while True:
            page = aws_call(s3.list_objects_v2, Bucket=bucket, Prefix=base, **token)
            for item in page.get("Contents") or []:
                key = str(item.get("Key"))
                if not s3_record_key(key, base):
                    continue
                name = f"s3://{bucket}/{key}"
                if int(item.get("Size") or 0) > MAX_INPUT_BYTES:
                    raise UserError(f"over {MAX_INPUT_BYTES} bytes: not a release record", file=name)
                try:
                    body = aws_call(s3.get_object, Bucket=bucket, Key=key)["Body"].read(MAX_INPUT_BYTES + 1)
                except UserError:
                    raise
                except Exception as err:  # noqa: BLE001 - botocore ClientError
                    if error_code(err) in ("NoSuchKey", "404"):
                        continue  # deleted since the listing: not there
                    raise
                records.append(parse_record(body, name))
            if not page.get("IsTruncated"):
                return records
            token = {"ContinuationToken": str(page.get("NextContinuationToken"))}
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore ClientError
        raise UserError(f"cannot read the release records: {err}", file=where, key="--s3") from None
