"""The typed shapes of the JSON files the verbs hand each other (build summary, variant lock, release record):
what a reader relies on, checked when the file is read, so a field of the wrong type is exit 2 naming the
file and the key, never a traceback deep in a verb (issue 32, item 3).

Loose on purpose: unknown keys are kept (newer writers add fields) and only the fields the readers use are
typed; values are not coerced (`strict`), so `"digest": ["x"]` is refused, not turned into text.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from pydantic import BaseModel, ConfigDict


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class SummaryEntry(Loose):
    variant: str
    status: Optional[str] = None
    image_id: Optional[str] = None
    digest: Optional[str] = None
    lock: Optional[str] = None
    tags: List[str] = []
    pushed: List[str] = []
    channels: List[str] = []


class BuildSummary(Loose):
    variants: List[SummaryEntry]


class LockEnv(Loose):
    name: str
    value: Optional[str] = None
    overridable: bool = False


class LockComponent(Loose):
    """A component block's fields the readers use as text (a recipe's `prefix`/bin path, `method` source or
    base, `version` gates): `prefix: 5` is exit 2 naming `components.NAME.prefix`, not a traceback."""

    prefix: Optional[str] = None
    method: Optional[str] = None
    version: Optional[str] = None


class LockOptions(Loose):
    cuda_arch: Optional[str] = None


class VariantLock(Loose):
    """What the readers of a lock use (recipes, checks, release); the writer is imagebuild.variant."""

    name: Optional[str] = None
    env: List[LockEnv]
    components: Dict[str, LockComponent] = {}
    checks: Dict[str, Dict[str, Any]] = {}
    channels: List[str] = []
    python: Optional[str] = None
    base: Optional[Dict[str, Any]] = None
    platform: Optional[str] = None
    instance_types: List[str] = []
    options: Optional[LockOptions] = None


class RecordRepository(Loose):
    repository: Optional[str] = None
    tags: List[str] = []


class RecordChannel(Loose):
    repository: Optional[str] = None
    tag: Optional[str] = None
    digest: Optional[str] = None
    history: List[Dict[str, Any]] = []


class IndexEntry(Loose):
    digest: Optional[str] = None
    platform: Optional[str] = None


class RecordIndex(Loose):
    digest: Optional[str] = None
    manifests: List[IndexEntry] = []


class ReleaseRecord(Loose):
    """A release record (imagebuild/release/record.py writes it) as prune and release read it."""

    variant: Optional[str] = None
    image_id: Optional[str] = None
    digest: Optional[str] = None
    released_at: Optional[str] = None
    repositories: List[RecordRepository] = []
    channels: List[RecordChannel] = []
    index: Optional[RecordIndex] = None


class IntentWrite(Loose):
    repository: Optional[str] = None
    tag: Optional[str] = None
    digest: Optional[str] = None


class ReleaseIntent(Loose):
    """An interrupted release's intent (imagebuild/release/transaction.py `intent` writes it) as release and
    prune read it: `transaction.intent_refusal` judges its schema and digest; the writes are typed here."""

    variant: Optional[str] = None
    digest: Optional[str] = None
    started_at: Optional[str] = None
    writes: List[IntentWrite] = []
