"""`build.py push`: push the built images of build/summary.json to an OCI registry or ECR, by digest.

Each pushed ref and its registry digest go back into the summary (`digest`, `pushed`), which `release` reads.
A tag that already holds another image is refused (exit 1) unless `--force`; the same image is a no-op.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from imagebuild.errors import ChecksFailed, UserError
from imagebuild.retry import RetryPolicy


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def add_registry_args(p: argparse.ArgumentParser) -> None:
    """Where images go and how to log in; shared by push and release."""
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--registry",
        metavar="HOST[/NAMESPACE]",
        help="OCI registry to push to (default: $IMAGE_REGISTRY); never committed, give it in CI settings",
    )
    where.add_argument(
        "--ecr", action="store_true", help="push to Amazon ECR (boto3; region from --region/env)"
    )
    p.add_argument("--username", help="registry user (else REGISTRY_USERNAME, else the docker config)")
    p.add_argument(
        "--password-stdin", action="store_true", help="read the registry password from standard input"
    )
    p.add_argument("--docker-config", metavar="DIR_OR_FILE", help="docker config to read logins from")
    p.add_argument(
        "--plain-http", action="store_true", help="talk HTTP to the registry (loopback is by default)"
    )
    p.add_argument("--region", help="AWS region for ECR/S3 (default: the AWS config)")
    p.add_argument("--endpoint-url", help="AWS endpoint override (tests point it at moto's server)")
    p.add_argument("--attempts", type=int, default=5, help="tries per registry/AWS call (default 5)")


def add_summary_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--summary", default="build/summary.json", help="build summary (default build/summary.json)"
    )
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME", help="only this variant (repeatable)"
    )


def register(sub) -> None:
    p = sub.add_parser("push", help="push built images by digest to a registry or ECR", description=__doc__)
    add_summary_args(p)
    add_registry_args(p)
    p.add_argument(
        "--tag", action="append", default=[], help="extra tag to push (repeatable; {variant} expands)"
    )
    p.add_argument("--repository-prefix", default="", help="prefix for repository names (e.g. team/)")
    p.add_argument("--force", action="store_true", help="overwrite a tag that holds another image")
    p.set_defaults(func=run)


def policy_from(args: argparse.Namespace) -> RetryPolicy:
    if args.attempts < 1 or args.attempts > 20:
        raise UserError("must be between 1 and 20", key="--attempts")
    return RetryPolicy(attempts=args.attempts)


def read_password(args: argparse.Namespace) -> Optional[str]:
    if not args.password_stdin:
        return None
    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise UserError("--password-stdin given but standard input was empty", key="--password-stdin")
    return secret


def docker_client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure to reach the daemon means the same here
        raise UserError(f"docker engine unreachable: {err}", hint="is dockerd running? DOCKER_HOST?") from err
    return client


def select_entries(summary: Dict[str, Any], names: List[str], path: str) -> List[Dict[str, Any]]:
    """The built variants asked for; an unknown name is a user error, an unbuilt one is skipped loudly."""
    entries = summary["variants"]
    known = {e.get("variant") for e in entries}
    for name in names:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summary", file=path, key="--variant")
    chosen = [e for e in entries if not names or e.get("variant") in names]
    built = []
    for e in chosen:
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):  # skipped: up to date
            log(f"skip {e.get('variant')}: status {e.get('status')!r}, nothing to push")
            continue
        built.append(e)
    if not built:
        raise UserError("no built variant to push", file=path, hint="run `build.py build` first")
    return built


def target_repository(local_tag: str, prefix: str) -> Tuple[str, Optional[str]]:
    """Repository path and tag of a summary tag, with its registry part (if any) dropped."""
    from imagebuild.registry import split_ref

    ref = split_ref(local_tag, key="tags")
    return prefix + ref.repository, ref.tag


class Destination:
    """An OCI registry or ECR: where refs point, who we are there, and how to ask what a tag holds."""

    def __init__(self, args: argparse.Namespace, policy: RetryPolicy) -> None:
        from imagebuild import registry as reg

        self.args, self.policy = args, policy
        self.ecr_client = None
        password = read_password(args)
        if args.ecr:
            from imagebuild import ecr

            self.ecr_client = ecr.make_client("ecr", args.region, args.endpoint_url)
            self.creds = ecr.login(self.ecr_client, policy)
            self.host = ecr.registry_host(self.ecr_client, policy)
            self.namespace = ""
            self.existing = ecr.existing_image(self.ecr_client, policy)
            return
        target = args.registry or os.environ.get("IMAGE_REGISTRY")
        if not target:
            raise UserError(
                "no registry given", key="--registry", hint="--registry HOST[/NS], $IMAGE_REGISTRY or --ecr"
            )
        self.host, _, self.namespace = target.strip("/").partition("/")
        self.namespace = self.namespace + "/" if self.namespace else ""
        self.creds = reg.resolve_credentials(
            self.host, args.username, password, docker_config=args.docker_config
        )
        self.api = reg.RegistryAPI(
            self.host, self.creds, plain_http=True if args.plain_http else None, policy=policy, log=log
        )
        self.existing = lambda ref: self.api.manifest(ref.repository, ref.digest or ref.tag)

    def prepare(self, repository: str) -> str:
        """The full repository path in this destination (ECR: created if missing)."""
        if self.ecr_client is not None:
            from imagebuild import ecr
            from imagebuild.registry import split_ref

            repo = ecr.ensure_repository(self.ecr_client, repository, self.policy, log)
            return split_ref(repo["repositoryUri"]).repository
        return self.namespace + repository

    def ref(self, repository: str, tag: str):
        from imagebuild.registry import ImageRef

        return ImageRef(self.host, repository, tag)


def run(args: argparse.Namespace) -> int:
    from imagebuild import registry as reg

    policy = policy_from(args)
    summary_path = Path(args.summary)
    summary = reg.load_summary(summary_path)
    entries = select_entries(summary, args.variant, str(summary_path))
    for t in args.tag:
        reg.check_tag(t.replace("{variant}", "v"), key="--tag")
    dest = Destination(args, policy)
    client = docker_client()
    failures = 0
    for entry in entries:
        variant = entry["variant"]
        tags = entry.get("tags") or []
        if not tags:
            raise UserError(
                f"variant {variant!r} has no tags in the summary", file=str(summary_path), key="tags"
            )
        repository, first_tag = target_repository(tags[0], args.repository_prefix)
        wanted = []
        for t in tags:
            repo_t, tag_t = target_repository(t, args.repository_prefix)
            wanted.append((repo_t, tag_t or "latest"))
        wanted += [
            (repository, reg.check_tag(t.replace("{variant}", variant), key="--tag")) for t in args.tag
        ]
        log(f"push {variant} ({entry['image_id'][:19]})")
        try:
            client.images.get(entry["image_id"])
        except Exception as err:  # noqa: BLE001 - docker.errors.ImageNotFound and friends
            raise UserError(
                f"image {entry['image_id']} of variant {variant!r} not in the local engine: {err}",
                file=str(summary_path),
                key="image_id",
            ) from err
        results = []
        try:
            for repo_t, tag_t in dict.fromkeys(wanted):
                ref = dest.ref(dest.prepare(repo_t), tag_t)
                results.append(
                    reg.push_image(
                        client,
                        entry["image_id"],
                        ref,
                        dest.creds,
                        existing=dest.existing,
                        force=args.force,
                        policy=policy,
                        log=log,
                    )
                )
        except ChecksFailed as err:
            log(f"refused: {err}")
            failures += 1
        finally:
            if results:
                reg.record_pushes(summary, variant, results)
                reg.write_json_atomic(summary_path, summary)
        for res in results:
            print(f"{variant}\t{res.ref}\t{res.digest}")
    if failures:
        raise ChecksFailed(f"{failures} variant(s) not pushed (see above)")
    return 0
