"""`--shard I/N`: split the variants among N CI jobs, each variant always on the same shard.

A variant's shard is sha256(name) mod N, so it does not move when other variants are added or removed (a
runner keeps building the variants its cache knows). Shards may differ in size by chance; every variant is
in exactly one shard.
"""

from __future__ import annotations

import hashlib
import re
from typing import List, Optional, Sequence, Tuple, TypeVar

from imagebuild.errors import UserError

T = TypeVar("T")


def parse_shard(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """`I/N` (1 <= I <= N) -> (I, N); None when not given."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not (1 <= int(m.group(1)) <= int(m.group(2))):
        raise UserError(f"--shard wants I/N with 1 <= I <= N, got {text!r}", key="--shard", hint="e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def shard_of(name: str, count: int) -> int:
    """The 1-based shard of a variant name among `count` shards."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % count + 1


def select(items: Sequence[T], names: Sequence[str], shard: Optional[Tuple[int, int]]) -> List[T]:
    """The items whose name (same position in `names`) falls in the shard; all of them without one."""
    if shard is None:
        return list(items)
    index, count = shard
    return [item for item, name in zip(items, names) if shard_of(name, count) == index]
