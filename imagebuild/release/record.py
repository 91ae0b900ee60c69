"""Release: promote a digest to release tags only when its checks passed for that same image, and say so.

A release is a promise: "this digest was built from this lock and passed these checks". So the gate is
strict and fails closed:
- the build summary names the image id and the digest it was pushed as;
- a static check report names that same image id with `passed: true` (and no failed/unknown check);
- when asked, a pre-flight report names that same digest or image id with verdict `pass`;
- the registry confirms the digest's manifest points at that image id (config digest), so a summary that
  lies or a registry that holds something else cannot slip through;
- release tags are never overwritten: one that already names another digest refuses the release.
Promotion copies the manifest bytes under the new tag (registry v2 PUT or ECR PutImage): the digest cannot
change. The record (lock, digest, reports with their sha256, time) goes to JSON locally and, when configured,
to S3; release notes compare component versions with the previous record.

Pure functions first (gate, record, notes); the I/O (registry, S3) sits in small functions at the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from imagebuild.check.report import gather_check_reports as gather_check_reports
from imagebuild.errors import UserError
from imagebuild.jsonfile import read_json as read_json
from imagebuild.release.names import INTENTS, LOCKS, PENDING, typed_record
from imagebuild.release.push import pushed_refs
from imagebuild.variant import lock_from_labels as lock_from_labels

RECORD_SCHEMA = "efa-image-build/release-record/v1"
BAD_CHECK_STATUSES = ("fail", "unknown")
HAS_IMAGE = ("built", "skipped")  # skipped: already built from this very content, the image id is known


# -- reading the inputs (bad input -> UserError, exit 2) --------------------------------------------------
def gather_summaries(docs: List[Tuple[str, Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """The variants of several build summaries (one per CI job). A variant with an image in one summary
    and failed or absent in the others is the one with the image; two different images: bad input."""
    chosen: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    order: List[str] = []
    for path, doc in docs:
        for entry in doc["variants"]:
            name = entry.get("variant")
            if name not in chosen:
                chosen[name] = (path, entry)
                order.append(name)
                continue
            first_path, first = chosen[name]
            if entry.get("status") not in HAS_IMAGE:
                continue
            if first.get("status") not in HAS_IMAGE:
                chosen[name] = (path, entry)
            elif first.get("image_id") != entry.get("image_id"):
                raise UserError(
                    f"variant {name!r} was built as {entry.get('image_id')} here and as "
                    f"{first.get('image_id')} in {first_path}",
                    file=path,
                    key="variants",
                )
    return [chosen[n][1] for n in order]


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# -- the gate (pure) ---------------------------------------------------------------------------------------
@dataclass
class Gate:
    """Why a variant may or may not be released; `reasons` empty means it may."""

    variant: str
    image_id: Optional[str]
    digest: Optional[str]
    reasons: List[str] = field(default_factory=list)
    checks: Optional[Dict[str, Any]] = None  # the check report entry that cleared it
    preflight: Optional[Dict[str, Any]] = None  # the pre-flight report that cleared it, with its path

    @property
    def ok(self) -> bool:
        return not self.reasons


def preflight_names(report: Dict[str, Any], digest: Optional[str], image_id: Optional[str]) -> bool:
    """Does this pre-flight report say which image it ran, and is it this one (digest or image id)?

    Looked for in `image` (as `build.py preflight --sagemaker` writes it) or `inputs.image`: a dict with
    `digest`, `image_id` or `ref` (a `...@sha256:` reference). A report that names no image clears nothing.
    """
    found = []
    for holder in (report, report.get("inputs") if isinstance(report.get("inputs"), dict) else {}):
        img = holder.get("image")
        if isinstance(img, dict):
            found += [img.get("digest"), img.get("image_id")]
            ref = img.get("ref") or img.get("uri")
            if isinstance(ref, str) and "@" in ref:
                found.append(ref.rsplit("@", 1)[1])
        elif isinstance(img, str) and "@" in img:
            found.append(img.rsplit("@", 1)[1])
    return any(x and x in (digest, image_id) for x in found)


def preflight_lock_refusal(report: Dict[str, Any], lock: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why the lock a pre-flight found in its image is not the lock at this digest, or None.

    A report made inside a container (`validators run`/`parse --image`) says which lock its image carried;
    a digest typed by hand onto a run of another image shows here. A report made outside the image
    (SageMaker's, host-side, on the digest SageMaker pulled) has no `lock` key: the digest is the evidence.
    """
    from efa_validators.run.imagebind import lock_sha256

    image = report.get("image") if isinstance(report.get("image"), dict) else {}
    if "lock" not in image:
        return None
    ran = image.get("lock")
    if not isinstance(ran, dict) or not ran.get("sha256"):
        return "the run found no variant lock in its image: it did not run in an image this tool built"
    if lock is None:
        return "no lock at this digest to compare the pre-flight's with"
    if ran["sha256"] != lock_sha256(lock):
        return (
            f"the pre-flight ran in an image with lock {ran.get('name')!r} ({ran['sha256'][:19]}...), not "
            f"this digest's {lock.get('name')!r} ({lock_sha256(lock)[:19]}...)"
        )
    return None


def preflight_refusal(report: Dict[str, Any]) -> Optional[str]:
    """Why this pre-flight report cannot clear a release, or None. A replayed recording proves nothing
    about the image's run (it says REPLAY); a launch the log contradicts is a spoof or a mix-up."""
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    if report.get("replay") or run.get("replay"):
        return "REPLAY: made from a replayed recording, not a run of the image"
    launch = [
        c for c in report.get("checks") or [] if isinstance(c, dict) and c.get("name") == "launch-matches-log"
    ]
    if any(c.get("status") != "pass" for c in launch):
        return "the log does not match what the launcher started (check launch-matches-log)"
    if report.get("verdict") != "pass":
        return f"verdict {report.get('verdict')!r}, not pass"
    return None


def gate_variant(
    entry: Dict[str, Any],
    check_report: Dict[str, Any],
    preflights: List[Tuple[str, Dict[str, Any]]],
    require_preflight: bool,
) -> Gate:
    """Decide from the documents alone whether `entry` (a build summary variant) may be released."""
    variant = entry.get("variant") or "?"
    image_id, digest = entry.get("image_id"), entry.get("digest")
    gate = Gate(variant, image_id, digest)
    if entry.get("status") not in HAS_IMAGE or not image_id:
        gate.reasons.append(f"build status is {entry.get('status')!r}: no image")
        return gate
    pushed = [r for r in pushed_refs(entry) if r.digest == digest]
    if not digest or not pushed:
        gate.reasons.append("no pushed digest in the build summary (run `efa-image-build push` first)")
    mine = [
        i for i in check_report.get("images") or [] if isinstance(i, dict) and i.get("image_id") == image_id
    ]
    if not mine:
        gate.reasons.append(
            f"no static check report entry names image {image_id} (make one: `efa-image-build test --variant "
            f"{variant}`, then pass its build/test-report.json with --checks)"
        )
    else:
        for item in mine:
            bad = [c.get("name") for c in item.get("checks") or [] if c.get("status") in BAD_CHECK_STATUSES]
            if item.get("passed") is not True:
                failing = ", ".join(
                    f"{c.get('name')} ({c.get('status')})"
                    for c in item.get("checks") or []
                    if c.get("status") in BAD_CHECK_STATUSES
                )
                gate.reasons.append(
                    f"static checks did not pass for {variant} (image {image_id}): "
                    + (failing or f"passed={item.get('passed')!r}")
                )
            elif bad:
                gate.reasons.append(f"report says passed but these checks are fail/unknown: {', '.join(bad)}")
        if not gate.reasons:
            gate.checks = mine[0]
    if require_preflight:
        named = [(p, r) for p, r in preflights if preflight_names(r, digest, image_id)]
        if not named:
            gate.reasons.append(
                f"no pre-flight report names digest {digest} or image {image_id} "
                f"(given: {', '.join(p for p, _ in preflights) or 'none'})"
            )
        for path, rep in named:
            why = preflight_refusal(rep)
            if why:
                gate.reasons.append(f"pre-flight {path}: {why}")
        if named and not any(preflight_refusal(r) for _, r in named):
            gate.preflight = {"path": named[0][0], "report": named[0][1]}
    return gate


def expand_tag(template: str, variant: str, when: datetime) -> str:
    return template.replace("{variant}", variant).replace("{date}", when.strftime("%Y%m%d"))


# -- the record and the notes (pure) ----------------------------------------------------------------------
def _preflight_summary(report: Dict[str, Any]) -> Dict[str, Any]:
    tests = report.get("nccl_tests") or {}
    return {
        "verdict": report.get("verdict"),
        "instance_type": report.get("instance_type"),
        "nodes": report.get("nodes"),
        "nccl_version": report.get("nccl_version"),
        "plateau_busbw": tests.get("plateau_busbw") if isinstance(tests, dict) else None,
        "sagemaker_job": (report.get("sagemaker") or {}).get("job_name"),
    }


def make_record(
    gate: Gate,
    lock: Optional[Dict[str, Any]],
    lock_source: str,
    repositories: List[Dict[str, Any]],
    previous: Optional[Dict[str, Any]],
    when: datetime,
    tool_version: str,
    base_digest: Optional[str] = None,
) -> Dict[str, Any]:
    """The release record. Only facts about the image and its evidence: no credentials, no environment.
    `base_digest`: what the base resolved to at build time (the build summary's), else the lock's pin."""
    reports: Dict[str, Any] = {
        "checks": {
            "path": (gate.checks or {}).get("report_path"),
            "sha256": sha256_file(Path(gate.checks["report_path"]))
            if (gate.checks or {}).get("report_path")
            else None,
            "passed": True,
            "checks": [
                {"name": c.get("name"), "status": c.get("status")}
                for c in (gate.checks or {}).get("checks") or []
            ],
        }
    }
    if gate.preflight:
        path = Path(gate.preflight["path"])
        reports["preflight"] = dict(
            _preflight_summary(gate.preflight["report"]),
            path=str(path),
            sha256=sha256_file(path) if path.exists() else None,
        )
    return {
        "schema": RECORD_SCHEMA,
        "variant": gate.variant,
        "released_at": when.isoformat(timespec="seconds"),
        "image_id": gate.image_id,
        "digest": gate.digest,
        "repositories": repositories,
        "lock": lock,
        "lock_source": lock_source,
        "base": {
            "image": ((lock or {}).get("base") or {}).get("image"),
            "digest": base_digest or ((lock or {}).get("base") or {}).get("digest"),
        },
        "reports": reports,
        "software": (gate.checks or {}).get("software"),
        "previous": {"digest": previous.get("digest"), "released_at": previous.get("released_at")}
        if previous
        else None,
        "tool": {"name": "efa-image-build", "version": tool_version},
    }


def _components(lock: Optional[Dict[str, Any]]) -> Dict[str, str]:
    comps = (lock or {}).get("components") or {}
    return {name: str((c or {}).get("version")) for name, c in comps.items() if isinstance(c, dict)}


def _change(old: Optional[str], new: Optional[str]) -> str:
    from imagebuild.versions import Version

    if old is None:
        return "added"
    if new is None:
        return "removed"
    if old == new:
        return "unchanged"
    try:
        return (
            "upgraded"
            if Version(new) > Version(old)
            else "downgraded"
            if Version(new) < Version(old)
            else "changed"
        )
    except ValueError:
        return "changed"


def component_changes(
    lock: Optional[Dict[str, Any]], previous_lock: Optional[Dict[str, Any]]
) -> List[Tuple[str, Optional[str], Optional[str], str]]:
    """(component, previous version, this version, change) for every component in either lock, by name."""
    new, old = _components(lock), _components(previous_lock) if previous_lock is not None else {}
    rows = []
    for name in sorted(set(new) | set(old)):
        if previous_lock is None:
            rows.append((name, None, new.get(name), "first release"))
        else:
            rows.append((name, old.get(name), new.get(name), _change(old.get(name), new.get(name))))
    return rows


def _recorded_software(record: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    soft = (record or {}).get("software")
    return soft if isinstance(soft, dict) and "error" not in soft else None


def package_changes(
    new: Dict[str, str], old: Dict[str, str]
) -> List[Tuple[str, Optional[str], Optional[str], str]]:
    """(package, previous version, this version, change) for each Python package that differs."""
    rows = []
    for name in sorted(set(new) | set(old)):
        change = _change(old.get(name), new.get(name))
        if change != "unchanged":
            rows.append((name, old.get(name), new.get(name), change))
    return rows


def software_notes(record: Dict[str, Any], previous: Optional[Dict[str, Any]]) -> List[str]:
    """The notes' lines on the training code (content hash) and the Python packages installed, against the
    previous release: what `build.py test` read in the image (its check report's `software`)."""
    lines = ["", "## Training code and Python packages", ""]
    soft = _recorded_software(record)
    if soft is None:
        given = record.get("software")
        why = given.get("error") if isinstance(given, dict) else None
        why = why or "the check report has no `software` (run this version of `efa-image-build test`)"
        lines.append(f"Not recorded: {why}.")
        return lines
    old = _recorded_software(previous)
    code, old_code = soft.get("code"), (old or {}).get("code")
    if code is None:
        lines.append("- training code: none in the image")
    else:
        was = (old_code or {}).get("sha256")
        change = (
            "first record of it"
            if old is None
            else "unchanged"
            if was == code["sha256"]
            else f"changed, was `{was}`"
            if was
            else "added"
        )
        lines.append(
            f"- training code `{code['path']}` ({code['files']} files): `{code['sha256']}` ({change})"
        )
    packages = soft.get("python_packages") or {}
    if old is None:
        lines.append(f"- Python packages: {len(packages)} installed (no previous record of them to compare)")
        return lines
    rows = package_changes(packages, old.get("python_packages") or {})
    same = len(packages) - sum(1 for r in rows if r[2] is not None)
    lines.append(f"- Python packages: {len(rows)} changed, {same} unchanged")
    if rows:
        lines += ["", "| package | previous | this release | change |", "|---|---|---|---|"]
        lines += [f"| {n} | {o or '-'} | {v or '-'} | {c} |" for n, o, v, c in rows]
    return lines


def release_notes(record: Dict[str, Any], previous: Optional[Dict[str, Any]]) -> str:
    """Markdown: what was released, on what evidence, and component versions against the previous release."""
    lock = record.get("lock") or {}
    lines = [
        f"# Release of {record['variant']} ({record['released_at']})",
        "",
        f"- digest: `{record['digest']}`",
        f"- image id: `{record['image_id']}`",
    ]
    for repo in record.get("repositories") or []:
        tags = ", ".join("`" + t + "`" for t in repo["tags"]) or "none (channels only)"
        lines.append(f"- {repo['repository']}: tags {tags}")
    index = record.get("index")
    if isinstance(index, dict):
        entries = ", ".join(f"{m.get('platform')} `{m.get('digest')}`" for m in index.get("manifests") or [])
        lines.append(f"- image index `{index.get('digest')}` (the tags name it): {entries}")
    base = (lock.get("base") or {}).get("image")
    if base:
        prev_base = (((previous or {}).get("lock") or {}).get("base") or {}).get("image")
        moved = f" (was `{prev_base}`)" if previous and prev_base and prev_base != base else ""
        digest = (record.get("base") or {}).get("digest")
        prev_digest = ((previous or {}).get("base") or {}).get("digest")
        pinned = f", digest `{digest}`" if digest else ", digest not recorded"
        if digest and prev_digest and prev_digest != digest:
            pinned += f" (was `{prev_digest}`)"
        lines.append(f"- base: `{base}`{moved}{pinned}")
    for chan in record.get("channels") or []:
        last = (chan.get("history") or [{}])[-1]
        if last.get("released_at") == record["released_at"]:
            lines.append(
                f"- channel `{chan['repository']}:{chan['tag']}`: moved from "
                f"`{last.get('from') or 'nothing'}` to `{chan['digest']}`"
            )
    checks = record["reports"]["checks"]
    lines.append(
        f"- static checks: passed ({len(checks['checks'])} checks, report `{checks['sha256'][:19]}`)"
    )
    pre = record["reports"].get("preflight")
    if pre:
        bw = f", busbw plateau {pre['plateau_busbw']} GB/s" if pre.get("plateau_busbw") is not None else ""
        lines.append(f"- pre-flight: {pre['verdict']} on {pre.get('nodes')} x {pre.get('instance_type')}{bw}")
    else:
        lines.append("- pre-flight: not required for this release")
    lines += ["", "## Components", ""]
    if previous:
        lines.append(
            f"Against the previous release `{previous.get('digest')}` ({previous.get('released_at')})."
        )
    else:
        lines.append("No previous release record: first release of this variant.")
    lines += ["", "| component | previous | this release | change |", "|---|---|---|---|"]
    for name, old, new, change in component_changes(
        record.get("lock"), (previous or {}).get("lock") if previous else None
    ):
        lines.append(f"| {name} | {old or '-'} | {new or '-'} | {change} |")
    lines += software_notes(record, previous)
    return "\n".join(lines) + "\n"


# -- where records live: a local folder and, optionally, S3 ------------------------------------------------
def record_name(record: Dict[str, Any]) -> str:
    """`<stamp>-<digest12>-<record_id>`: two releases of one digest in one second (two runners) never
    take one name (the id is random, in the record; records from before it have none)."""
    stamp = record["released_at"].replace(":", "").replace("-", "").replace("+0000", "Z")
    name = f"{stamp}-{record['digest'].split(':', 1)[-1][:12]}"
    return f"{name}-{record['record_id']}" if record.get("record_id") else name


def new_record_id() -> str:
    return os.urandom(6).hex()


def parse_s3_uri(uri: str, key: str = "--s3") -> Tuple[str, str]:
    if not uri.startswith("s3://") or len(uri) <= 5:
        raise UserError(f"not an S3 URI: {uri!r}", key=key, hint="s3://bucket/prefix")
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise UserError(f"no bucket in {uri!r}", key=key)
    if any(part in ("", ".", "..") for part in prefix.strip("/").split("/")) and prefix.strip("/"):
        raise UserError(f"empty, '.' or '..' part in the prefix of {uri!r}", key=key)
    return bucket, prefix.strip("/")


class RecordStore:
    """Release records in a local folder or S3 (the registry's store, registryrecords.py, serves the same
    methods). Per variant: `<root>/<variant>/<name>.json`, `.md`, `latest.json`, and while a
    release is under way its intent (`<variant>/pending.json` locally, `.intents/<variant>.json` in S3,
    beside the locks' `.locks/`: folders no variant is named, so the record reader never matches them);
    locally (`root`), in S3 (`s3_uri`), or both. With S3
    the writes are conditional (imagebuild/release/s3records.py), so runners sharing a bucket never
    overwrite each other's records."""

    def __init__(self, root: Optional[Path], s3: Any = None, s3_uri: Optional[str] = None) -> None:
        self.root = root
        self.s3 = s3
        self.bucket, self.prefix = parse_s3_uri(s3_uri) if s3_uri else (None, "")
        self._etags: Dict[str, Optional[str]] = {}  # variant -> ETag of the latest.json read (S3)

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def where(self) -> str:
        places = [str(self.root)] if self.root is not None else []
        if self.s3 is not None:
            places.append(f"s3://{self.bucket}/{self.prefix}".rstrip("/"))
        return " and ".join(places)

    def check_reachable(self) -> None:
        """Before promoting anything: can we write where the record must go? (fail before, not after)."""
        if self.root is not None:
            folder = self.root.absolute()
            while not folder.exists():  # nothing is created yet: a dry run writes nothing
                folder = folder.parent
            if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
                why = "a file is in the way" if not folder.is_dir() else f"{folder} is not writable"
                raise UserError(f"cannot write release records ({why})", file=str(self.root), key="--records")
        if self.s3 is None:
            return
        from imagebuild.adapters.aws import aws_call

        try:
            aws_call(self.s3.head_bucket, Bucket=self.bucket)
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - botocore ClientError
            raise UserError(f"S3 bucket {self.bucket!r} not usable: {err}", key="--s3") from err

    def _s3_key(self, variant: str, fname: str) -> str:
        """Where `fname` of `variant` lives in S3: a record under the variant's folder, its intent under
        `.intents/` (names.INTENTS: a namespace the record reader never matches)."""
        if fname == PENDING:
            return self._key(INTENTS, f"{variant}.json")
        return self._key(variant, fname)

    def _read(self, variant: str, fname: str, what: str) -> Optional[Dict[str, Any]]:
        """A record or intent of `variant`, typed by the one reader (names.typed_record) wherever it lives."""
        intent = fname == PENDING
        if self.s3 is not None:
            from imagebuild.release import s3records

            key = self._s3_key(variant, fname)
            doc, etag = s3records.get_json(self.s3, str(self.bucket), key, what)
            if doc is None and intent:  # written before intents had their own folder
                key = self._key(variant, PENDING)
                doc, etag = s3records.get_json(self.s3, str(self.bucket), key, what)
            if fname == "latest.json":
                self._etags[variant] = etag
            return None if doc is None else typed_record(doc, f"s3://{self.bucket}/{key}", intent)
        assert self.root is not None
        path = self.root / variant / fname
        return typed_record(read_json(path, what), str(path), intent) if path.exists() else None

    def latest(self, variant: str) -> Optional[Dict[str, Any]]:
        return self._read(variant, "latest.json", "the previous release record")

    def all_records(self) -> List[Dict[str, Any]]:
        """Every release record a name's role (release tag or channel) is read from, before any registry
        write: the local folder's (none yet on a first release) and the bucket's (a fresh runner's folder
        is empty; the team's records are there)."""
        from imagebuild.release.names import read_local_records, read_s3_records

        records = read_local_records(self.root, must_exist=False) if self.root is not None else []
        if self.s3 is not None:
            records += read_s3_records(self.s3, str(self.bucket), self.prefix)
        return records

    def pending(self, variant: str) -> Optional[Dict[str, Any]]:
        """The intent of an interrupted release of `variant` (imagebuild/release/transaction.py), or None."""
        return self._read(variant, PENDING, "the pending release intent")

    def write_pending(self, variant: str, intent: Dict[str, Any]) -> None:
        """Before the first tag write: what this release will write (replaces an interrupted run's)."""
        text = json.dumps(intent, indent=2, sort_keys=True) + "\n"
        if self.root is not None:
            self._write_local(self.root / variant, PENDING, text, replace=True)
        if self.s3 is not None:
            from imagebuild.adapters.aws import aws_call

            key = self._s3_key(variant, PENDING)
            aws_call(self.s3.put_object, Bucket=self.bucket, Key=key, Body=text.encode(),
                     ContentType="application/json")  # fmt: skip

    def clear_pending(self, variant: str) -> None:
        """After the record is written: the intent is done (an intent of before `.intents/` too)."""
        if self.root is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.root / variant / PENDING).unlink()
        if self.s3 is not None:
            from imagebuild.release import s3records

            s3records.delete(self.s3, str(self.bucket), self._s3_key(variant, PENDING))
            s3records.delete(self.s3, str(self.bucket), self._key(variant, PENDING))

    def _write_local(self, folder: Path, fname: str, data: str, replace: bool) -> str:
        tmp = folder / (fname + ".tmp")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data)
            if replace:
                tmp.replace(folder / fname)
            else:  # a record: never over another one (a name is unique; a clash is a bug or an attack)
                os.link(tmp, folder / fname)
                tmp.unlink()
        except OSError as err:  # full or read-only: the tags have moved; a rerun writes the record
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise UserError(
                f"cannot write the release record: {err.strerror}",
                file=str(folder / fname),
                key="--records",
                hint="free space or fix the folder, then rerun the same command (the tags are in place)",
            ) from None
        return str(folder / fname)

    def write(self, record: Dict[str, Any], notes: str) -> List[str]:
        """Write record + notes locally and/or to S3; returns where they went. A record is never written
        over another; in S3 `latest.json` is replaced only if it is still the one read before the release."""
        name = record_name(record)
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        written = []
        if self.root is not None:
            folder = self.root / record["variant"]
            for fname, data, replace in ((f"{name}.json", text, False), (f"{name}.md", notes, False),
                                         ("latest.json", text, True)):  # fmt: skip
                written.append(self._write_local(folder, fname, data, replace))
        if self.s3 is not None:
            from imagebuild.release import s3records

            variant, bucket = record["variant"], str(self.bucket)
            if variant not in self._etags:  # not read this run (--previous given): compare with what is there
                self.latest(variant)
            for fname, data, ctype in ((f"{name}.json", text, "application/json"),
                                       (f"{name}.md", notes, "text/markdown")):  # fmt: skip
                s3records.put(self.s3, bucket, self._key(variant, fname), data.encode(), ctype)
                written.append(f"s3://{bucket}/{self._key(variant, fname)}")
            key = self._key(variant, "latest.json")
            seen = self._etags[variant]
            self._etags[variant] = s3records.put(
                self.s3, bucket, key, text.encode(), "application/json", seen
            )
            written.append(f"s3://{bucket}/{key}")
        return written

    def lock_keys(self, repositories: List[str]) -> List[str]:
        """The S3 lock objects of `host/repo`s, sorted (two releases taking several never deadlock)."""
        names = sorted(set(repositories))
        return [self._key(LOCKS, f"{hashlib.sha256(n.encode()).hexdigest()[:16]}.json") for n in names]


def unique_repositories(entry: Dict[str, Any]) -> List[str]:
    """`host/repo` of every ref the summary says this digest was pushed as, in order, once each."""
    names = [r.name for r in pushed_refs(entry) if r.digest == entry.get("digest")]
    return list(dict.fromkeys(names))


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


# -- one release per repository at a time on this host ---------------------------------------------------
LOCK_WAIT_S = 600.0  # a release holding the lock is checking and writing a few tags: minutes at most


def lock_paths(repositories: List[str]) -> List[Path]:
    """One lock file per `host/repo`, in the temp folder (nothing is written where records go before the
    gate has passed), in sorted order so two releases taking several never deadlock."""
    folder = Path(tempfile.gettempdir())
    return [
        folder / f"efa-image-build-release-{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock"
        for name in sorted(set(repositories))
    ]


@contextmanager
def hold_lock(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """An exclusive flock on `path` (released by the kernel if this process dies), waited for at most
    `wait_s`. Why: the registry has no compare-and-set for tags, so two releases of one repository on this
    host must check and write in turn; the second then sees the tag taken and is refused."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise UserError(f"cannot open the release lock: {err.strerror}", file=str(path)) from None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(
                        f"another release of this repository held the lock for over {wait_s:.0f}s",
                        file=str(path),
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
