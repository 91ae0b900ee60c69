"""push: each built variant pushed by digest, its tags and twins' indexes, attested with a key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from imagebuild.errors import ChecksFailed, UserError
from imagebuild.pipeline.shared import print_fields, read_signing, select_built
from imagebuild.release.destinations import Destination, Registries, RegistryTarget, log


@dataclass(frozen=True)
class PushRequest:
    target: RegistryTarget
    summary: Path = Path("build/summary.json")
    variants: Sequence[str] = ()
    tags: Sequence[str] = ()  # extra tags; {variant} expands
    repository_prefix: str = ""
    force: bool = False  # overwrite a tag that holds another image
    fan_out: bool = False  # a CI job's part of the matrix: shared tags under TAG-ARCH, for `fan-in`
    sign_key: Optional[str] = None  # attest each pushed digest (SBOM, signed provenance) with this key
    matrix: str = "matrix.yaml"  # the matrix file the provenance names (with sign_key)


def _target_repository(local_tag: str, prefix: str) -> Tuple[str, Optional[str]]:
    """Repository path and tag of a summary tag, with its registry part (if any) dropped."""
    from imagebuild.adapters.registry import split_ref

    ref = split_ref(local_tag, key="tags")
    return prefix + ref.repository, ref.tag


def _write_once(entry: Dict[str, Any], req: PushRequest) -> Set[Tuple[str, str]]:
    """The (repository, tag) pairs of the summary's own tags (content tags, twins' shared tags): write-once,
    never moved, --force or not. Only a `--tag` extra is the user's to move (issue 30)."""
    pairs = (_target_repository(t, req.repository_prefix) for t in entry.get("tags") or [])
    return {(repo, tag or "latest") for repo, tag in pairs}


def _push_targets(entry: Dict[str, Any], req: PushRequest) -> List[Tuple[str, str]]:
    """(repository, tag) pairs a variant is pushed under: its summary tags but its channels (only release
    moves a channel), then the --tag extras; each once."""
    from imagebuild.adapters import registry as reg
    from imagebuild.release.channels import entry_channels, names_channel

    variant = entry["variant"]
    tags = entry.get("tags") or []
    if not tags:
        raise UserError(f"variant {variant!r} has no tags in the summary", file=str(req.summary), key="tags")
    repository, _first = _target_repository(tags[0], req.repository_prefix)
    channels = entry_channels(entry)
    wanted = []
    for t in tags:
        repo_t, tag_t = _target_repository(t, req.repository_prefix)
        if names_channel(t, channels):  # a channel names a gated digest: only release moves it
            log(
                f"  {repo_t}:{tag_t}: a channel of {variant}; not pushed (`efa-image-build release` moves it)"
            )
            continue
        wanted.append((repo_t, tag_t or "latest"))
    for t in req.tags:
        extra = reg.check_tag(t.replace("{variant}", variant), key="--tag")
        if extra in channels:
            raise UserError(
                f"{extra!r} is a channel of variant {variant!r}; push never moves a channel",
                key="--tag",
                hint=f"`efa-image-build release --variant {variant}` moves it to a digest whose checks "
                "passed",
            )
        wanted.append((repository, extra))
    return list(dict.fromkeys(wanted))


def _push_indexes(
    dest: Any,
    twins: Dict[Tuple[str, str], List[str]],
    entries: List[Dict[str, Any]],
    done: Dict[str, str],
    summary: Dict[str, Any],
    summary_path: Path,
    movable: Set[Tuple[str, str]],
    fixed: Set[Tuple[str, str]],
) -> int:
    """Put one image index under each tag the twins share, naming each twin's pushed digest; the index
    ref goes into each twin's summary entry (`index`). Returns how many indexes were refused."""
    from imagebuild.jsonfile import write_json_atomic
    from imagebuild.release.index import push_index, read_entry

    by_name = {e["variant"]: e for e in entries}
    refused = 0
    for (repo_t, tag_t), names in twins.items():
        ref = dest.ref(dest.prepare(repo_t), tag_t)
        missing = [n for n in names if n not in done]
        if missing:
            failed = [n for n in missing if n in by_name]
            log(f"index {ref} not written: {', '.join(missing)} not pushed in this run")
            refused += 1 if failed else 0  # a twin left out by --variant is the user's choice, not a failure
            continue
        try:
            api = dest.oci_api()
            members = [read_entry(api, ref.repository, done[n], by_name[n]["image_id"]) for n in names]
            force = (repo_t, tag_t) in movable  # only a --tag extra, with --force
            once = (repo_t, tag_t) in fixed
            digest, _same = push_index(api, ref, members, force=force, write_once=once, log=log)
        except ChecksFailed as err:
            log(f"refused: {err}")
            refused += 1
            continue
        for n in names:
            by_name[n]["index"] = f"{ref}@{digest}"
            print_fields(n, ref, digest)
        write_json_atomic(summary_path, summary)
    return refused


def push(req: PushRequest) -> List[Any]:
    """Push each built variant's image by digest under its tags; the pushes (`registry.PushResult`), also
    recorded in the summary. ChecksFailed when a tag holds another image (unless force)."""
    from imagebuild.adapters import registry as reg
    from imagebuild.adapters.docker_engine import connect, missing_image
    from imagebuild.building.summary import load_summary
    from imagebuild.jsonfile import write_json_atomic
    from imagebuild.release.fanin import is_content_tag
    from imagebuild.release.index import platform_tag, twin_groups, with_platform_tags
    from imagebuild.release.push import push_image, record_pushes

    policy = req.target.policy()
    summary_path = Path(req.summary)
    summary = load_summary(summary_path)
    entries = select_built(summary, req.variants, str(summary_path))
    signing = read_signing(req.sign_key, req.matrix) if req.sign_key else None  # bad key: exit 2 now
    for t in req.tags:
        reg.check_tag(t.replace("{variant}", "v"), key="--tag")
    dest = Destination(req.target, policy)
    client = connect()
    failures = 0
    pushed: List[Any] = []
    plans = [(entry, _push_targets(entry, req)) for entry in entries]
    fixed = with_platform_tags({pair for e in summary["variants"] for pair in _write_once(e, req)})
    # twins are found among every built variant of the summary, so one pushed alone (--variant) still goes
    # under its TAG-ARCH and never takes the shared tag from the index
    others = [e for e in summary["variants"] if e not in entries and e.get("image_id") and e.get("tags")]
    every = plans + [(e, _push_targets(e, req)) for e in others if e.get("status") in ("built", "skipped")]
    twins = twin_groups([(e["variant"], w) for e, wanted in every for w in wanted])
    done: Dict[str, str] = {}  # variant -> the digest it was pushed as
    for entry, wanted in plans:
        variant = entry["variant"]
        log(f"push {variant} ({entry['image_id'][:19]})")
        why = missing_image(client, entry["image_id"])
        if why is not None:
            raise UserError(
                f"image {entry['image_id']} of variant {variant!r} not in the local engine: {why}",
                file=str(summary_path),
                key="image_id",
            )
        arch = client.images.get(entry["image_id"]).attrs.get("Architecture") or "unknown"
        results = []
        try:
            for repo_t, tag_t in wanted:
                once = (repo_t, tag_t) in fixed  # before TAG-ARCH: the matrix's tag under its platform name
                if (repo_t, tag_t) in twins or (req.fan_out and not is_content_tag(entry, tag_t)):
                    tag_t = platform_tag(tag_t, arch)  # the shared tag gets the index; this image its own
                ref = dest.ref(dest.prepare(repo_t), tag_t)
                results.append(
                    push_image(
                        client,
                        entry["image_id"],
                        ref,
                        dest.creds,
                        existing=dest.existing,
                        force=req.force and not once,
                        write_once=once,
                        policy=policy,
                        log=log,
                    )
                )
            if results:
                done[variant] = results[-1].digest
        except ChecksFailed as err:
            log(f"refused: {err}")
            failures += 1
        finally:
            if results:
                record_pushes(summary, variant, results)
                write_json_atomic(summary_path, summary)
        for res in results:
            print_fields(variant, res.ref, res.digest)
        pushed += results
    movable = {key for key in twins if key not in fixed} if req.force else set()
    failures += _push_indexes(dest, twins, entries, done, summary, summary_path, movable, fixed)
    if signing is not None:
        from imagebuild.release.attestations import attach_for_entries

        attested = [e for e in entries if e.get("pushed")]
        apis = Registries(req.target, policy)  # each host's v2 API; ECR's with its token
        for where in attach_for_entries(client, apis.api, attested, *signing, log, apis.fixed_tags):
            print(f"attached\t{where}")
    if failures:
        raise ChecksFailed(f"{failures} variant(s) not pushed (see above)")
    return pushed
