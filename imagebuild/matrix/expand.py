"""Expand the matrix: each variant entry crossed with its axes (bake-style), merged into one body a variant.

Inheritance, lowest first: `defaults`, the `templates` named in `extends` (in order, each after its own
`extends`), the variant entry's own keys, the value of each axis (in the order the axes are written), then
every `include` whose `match` fits the combination. `exclude` removes combinations. An include or exclude
that matches nothing is an error (it is almost always a typo), and so are two variants with one name. The
checks of a variant's `checks_file` sit below all of these (`checksfile`).

In: the matrix as read (`Source`: lines kept, checked against the schema). Out: one `Expanded` a variant, its
body merged, filled, checked against the schema and the guards, which `resolve` turns into a Variant without
looking back at the file. Every error is a UserError with file, line and key; nothing here writes anything.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from imagebuild.errors import UserError
from imagebuild.matrix import schema
from imagebuild.matrix.checksfile import checks_layer
from imagebuild.matrix.guards import refuse_hostile
from imagebuild.matrix.validate import validate
from imagebuild.matrix.yamlsrc import MDict, MList, copy_dict, merge_all, with_key


@dataclass(frozen=True)
class Source:
    """The matrix file as read: its tree with lines, checked against the schema (the top level only)."""

    root: MDict
    path: str  # where it was read from: a checks_file and the training folders sit next to it
    file: str  # how errors name it


@dataclass(frozen=True)
class Expanded:
    """One variant's merged body before resolution, with where it came from (for error lines)."""

    name: str
    body: MDict  # merged raw tree (lines kept)
    spec: schema.VariantBody
    axes: Tuple[Tuple[str, str], ...]
    file: str
    line: Optional[int]
    folder: str  # the matrix's folder: the training folders are looked for there


def _at(node: Any, key: str) -> Optional[int]:
    return node.key_lines.get(key, node.line) if isinstance(node, MDict) else None


def _refusal(
    message: str, file: str, node: Any, field: str, key: str, hint: Optional[str] = None
) -> UserError:
    """A UserError at the line of `field` in `node` (the node's own line where it lacks the field)."""
    return UserError(message, file=file, line=_at(node, field), key=key, hint=hint)


MAX_EXTENDS_DEPTH = 100  # templates extending templates; real matrices use two or three levels
MAX_VARIANTS = 1000  # per matrix file; a product of axes beyond this is a typo, and would exhaust memory


def _template_chain(
    name: str,
    templates: MDict,
    file: str,
    where_line: Optional[int],
    memo: Dict[str, Tuple[str, ...]],
    seen: Tuple[str, ...] = (),
) -> Tuple[str, ...]:
    """Template names to apply, lowest first: each after its own `extends`, each once (its first place).

    Memoised per template, so a diamond of any depth costs one visit per template, not 2**depth.
    """
    if name in seen:
        raise UserError(
            f"templates extend each other in a loop: {' -> '.join(seen + (name,))}",
            file=file,
            line=where_line,
            key="extends",
        )
    if name not in templates:
        known = ", ".join(sorted(templates)) or "none defined"
        raise UserError(
            f"unknown template '{name}' (templates: {known})", file=file, line=where_line, key="extends"
        )
    if name in memo:
        return memo[name]
    if len(seen) >= MAX_EXTENDS_DEPTH:
        raise UserError(
            f"templates extend each other more than {MAX_EXTENDS_DEPTH} levels deep",
            file=file,
            line=where_line,
            key="extends",
        )
    body = templates[name]
    order: Dict[str, None] = {}
    for parent in body.get("extends") or []:
        for t in _template_chain(parent, templates, file, _at(body, "extends"), memo, seen + (name,)):
            order.setdefault(t, None)
    order.setdefault(name, None)
    memo[name] = tuple(order)
    return memo[name]


def _template_bodies(names: Sequence[str], templates: MDict) -> List[MDict]:
    return [copy_dict(templates[t], [k for k in templates[t] if k != "extends"]) for t in names]


def _combinations(group: MDict, file: str, gkey: str) -> List[Tuple[Tuple[str, str], ...]]:
    axes = group.get("axes") or MDict()
    names = list(axes)
    for axis in names:
        if not axes[axis]:
            raise _refusal("an axis needs at least one value", file, axes, axis, f"{gkey}.axes.{axis}")
    count = 1
    for axis in names:
        count *= len(axes[axis])
        if count > MAX_VARIANTS:
            message = f"the axes make more than {MAX_VARIANTS} combinations"
            hint = "split the matrix, or exclude what you do not build"
            raise _refusal(message, file, group, "axes", f"{gkey}.axes", hint=hint)
    combos = [tuple(zip(names, values)) for values in itertools.product(*(list(axes[a]) for a in names))]
    if not names:
        combos = [()]

    def check_refs(sel: MDict, key: str) -> None:
        for axis, value in sel.items():
            if axis not in axes:
                message = f"'{axis}' is not an axis of this variant (axes: {', '.join(names) or 'none'})"
                raise _refusal(message, file, sel, axis, f"{key}.{axis}")
            if value not in axes[axis]:
                message = f"axis '{axis}' has no value '{value}' (values: {', '.join(axes[axis])})"
                raise _refusal(message, file, sel, axis, f"{key}.{axis}")

    def matches(combo: Tuple[Tuple[str, str], ...], sel: MDict) -> bool:
        d = dict(combo)
        return all(d.get(k) == v for k, v in sel.items())

    excludes = group.get("exclude") or MList()
    for i, sel in enumerate(excludes):
        key = f"{gkey}.exclude[{i}]"
        check_refs(sel, key)
        if not any(matches(c, sel) for c in combos):
            raise UserError(
                "this exclude matches no combination", file=file, line=excludes.item_lines[i], key=key
            )
        combos = [c for c in combos if not matches(c, sel)]
    if not combos:
        raise _refusal("every combination is excluded", file, group, "exclude", f"{gkey}.exclude")
    includes = group.get("include") or MList()
    for i, inc in enumerate(includes):
        key = f"{gkey}.include[{i}].match"
        check_refs(inc["match"], key)
        if not any(matches(c, inc["match"]) for c in combos):
            raise UserError(
                "this include matches no combination (after excludes)",
                file=file,
                line=includes.item_lines[i],
                key=f"{gkey}.include[{i}]",
            )
    return combos


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _fill(template: str, values: Dict[str, str], file: str, line: Optional[int], key: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise UserError(
                f"'{{{name}}}' is not an axis here (axes: {', '.join(sorted(values)) or 'none'})",
                file=file,
                line=line,
                key=key,
            )
        return values[name]

    out = _PLACEHOLDER.sub(sub, template)
    if "{" in out or "}" in out:
        raise UserError(f"unbalanced braces in {template!r}", file=file, line=line, key=key)
    return out


class WriteOnceTag(UserError):
    """A tag that is neither a content tag nor a channel: refused, unless platform twins share it."""


_HASH_MARK = "\0content_hash\0"  # {content_hash} survives _fill's brace check as this, then is put back


def content_tag_or_channel(
    tag: str, channels: Sequence[str], file: str, line: Optional[int], key: str
) -> str:
    """A matrix tag is either a content tag (`{content_hash}` in its tag part: the same content re-pushes as
    a no-op, the next commit's content gets its own tag) or one of the variant's channels (only `release`
    moves it). Anything else is write-once (push never overwrites a tag) and moving (the next commit builds
    another image under the same name) at once: the second pipeline run's push would be refused."""
    repo, _, part = tag.rpartition(":")
    from imagebuild.adapters.registry import TOOL_TAG_PREFIX

    if part.startswith(TOOL_TAG_PREFIX):
        raise UserError(
            f"tags starting {TOOL_TAG_PREFIX!r} are the tool's release records (kept beside the images)",
            file=file,
            line=line,
            key=key,
            hint="choose a tag that does not start with " + TOOL_TAG_PREFIX,
        )
    if _HASH_MARK in repo:
        raise UserError(
            "{content_hash} belongs in the tag part (after ':'), not in the repository",
            file=file,
            line=line,
            key=key,
            hint='e.g. "team/training:{name}-{content_hash}"',
        )
    if _HASH_MARK in part:
        # filled with 12 hex, or `r<id8>-<hash12>` (22) for a --force rebuild: docker tags stop at 128
        if len(part.replace(_HASH_MARK, "x" * 22)) > 128:
            raise UserError(
                "the tag part is too long once {content_hash} is filled (docker tags stop at 128 characters)",
                file=file,
                line=line,
                key=key,
            )
        return tag.replace(_HASH_MARK, "{content_hash}")
    if part in channels:
        return tag
    raise WriteOnceTag(
        f"tag {tag!r} is write-once (push never overwrites it) and would move with every commit (another "
        "image each time): the second pipeline's push is refused",
        file=file,
        line=line,
        key=key,
        hint=f'make it a content tag, "{repo}:{part}-{{content_hash}}" (the same content re-pushes as a '
        f"no-op, new content gets a new tag), or a channel (`channels: [{part}]`, moved by release)",
    )


def _filled_channels(body: MDict, values: Dict[str, str], file: str) -> MDict:
    """The body with each channel's `{name}` and axis keys filled: `dev-{name}` is the variant's own channel,
    so two variants whose tags share a repository can each take one in the same release (one `dev` there
    would be one tag written two ways)."""
    chans = body.get("channels")
    if not isinstance(chans, MList) or not any("{" in str(c) for c in chans):
        return body
    filled = MList()
    filled.file, filled.line = chans.file, chans.line
    for ci, chan in enumerate(chans):
        at = chans.item_lines[ci] if ci < len(chans.item_lines) else chans.line
        text = _fill(str(chan), values, file, at, f"channels[{ci}]")
        if len(text) > 128:
            raise UserError("the channel is longer than 128 characters once filled", file=file, line=at,
                            key=f"channels[{ci}]")  # fmt: skip
        filled.append(text)
        filled.item_lines.append(at)
    return with_key(body, "channels", filled)


def _chain(
    group: MDict, defaults: MDict, templates: MDict, file: str, memo: Dict[str, Tuple[str, ...]]
) -> List[MDict]:
    """The layers every combination of a variant entry starts from: defaults, its templates, its own keys."""
    applied: Dict[str, None] = {}
    for tname in group.get("extends") or []:
        for t in _template_chain(tname, templates, file, _at(group, "extends"), memo):
            applied.setdefault(t, None)
    chain: List[MDict] = [defaults] + _template_bodies(list(applied), templates)
    chain.append(copy_dict(group, [k for k in group if k not in schema.GROUP_META_KEYS]))
    return chain


def _name(
    group: MDict, values: Dict[str, str], file: str, gkey: str, names: Dict[str, Tuple[str, Optional[int]]]
) -> str:
    """The variant's name with its axes filled: a valid name, and the first of its kind in the matrix."""
    name = _fill(group["name"], values, file, _at(group, "name"), f"{gkey}.name")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", name):
        message = f"variant name {name!r} is not a valid name (lowercase, digits, . _ -)"
        raise _refusal(message, file, group, "name", f"{gkey}.name")
    if name in names:
        message = f"two variants are named '{name}' (the other is at line {names[name][1]})"
        hint = "add an axis placeholder to the name, e.g. name: cuda{cuda}"
        raise _refusal(message, file, group, "name", f"{gkey}.name", hint=hint)
    names[name] = (file, _at(group, "name"))
    return name


def _filled_tags(
    body: MDict, values: Dict[str, str], file: str, platform: Optional[str], write_once: List[Any]
) -> MDict:
    """The body with each tag's `{name}` and axis keys filled ({content_hash} kept for the build to fill);
    a write-once tag is kept and noted in `write_once`, refused later unless a platform twin shares it."""
    if "tags" not in body:
        return body
    tags = MList()
    tags.file, tags.line = body["tags"].file, body["tags"].line
    channels = [str(c) for c in body.get("channels") or [] if isinstance(c, str)]
    for ti, tag in enumerate(body["tags"]):
        at = body["tags"].item_lines[ti]
        filled = _fill(tag, dict(values, content_hash=_HASH_MARK), file, at, f"tags[{ti}]")
        try:
            tags.append(content_tag_or_channel(filled, channels, file, at, f"tags[{ti}]"))
        except WriteOnceTag as err:  # unless a platform twin shares it (_refuse_unshared): then it names
            tags.append(filled)  # the twins' image index, as push writes it
            write_once.append((filled, platform or body.get("platform"), err))
        tags.item_lines.append(at)
    return with_key(body, "tags", tags)


def expand(source: Source, platform: Optional[str] = None) -> List[Expanded]:
    """Every variant of the matrix, merged and checked, in matrix order (not yet resolved).
    `platform` overrides every variant's (`build.py render --platform linux/arm64`)."""
    root, path, file = source.root, source.path, source.file
    folder = os.path.dirname(os.path.abspath(path))
    write_once: List[Any] = []  # (tag, platform, the refusal) of tags neither content tags nor channels
    defaults = root.get("defaults") or MDict()
    templates = root.get("templates") or MDict()
    out: List[Expanded] = []
    names: Dict[str, Tuple[str, Optional[int]]] = {}
    memo: Dict[str, Tuple[str, ...]] = {}
    checks_files: Dict[str, MDict] = {}
    for gi, group in enumerate(root["variants"]):
        gkey = f"variants[{gi}]"
        chain = _chain(group, defaults, templates, file, memo)
        for combo in _combinations(group, file, gkey):
            parts = list(chain)
            for axis, value in combo:
                parts.append(group["axes"][axis][value])
            for inc in group.get("include") or []:
                if all(dict(combo).get(k) == v for k, v in inc["match"].items()):
                    parts.append(inc["set"])
            body = merge_all(parts, file, group.line)
            layer = checks_layer(body, path, file, checks_files)
            if layer is not None:
                body = merge_all([layer] + parts, file, group.line)
            values = dict(combo)
            name = _name(group, values, file, gkey, names)
            body = _filled_channels(body, dict(values, name=name), file)
            body = _filled_tags(body, dict(values, name=name), file, platform, write_once)
            if platform is not None:
                body["platform"] = platform
            spec = validate(schema.VariantBody, body, body, file)
            refuse_hostile(spec, body, file)
            if len(out) >= MAX_VARIANTS:
                raise UserError(
                    f"the matrix makes more than {MAX_VARIANTS} variants",
                    file=file,
                    line=group.line,
                    key=gkey,
                )
            out.append(Expanded(name, body, spec, tuple(combo), file, _at(group, "name"), folder))
    _refuse_unshared(write_once, out)
    return out


def _refuse_unshared(write_once: List[Any], out: List[Expanded]) -> None:
    """A write-once tag is refused unless variants of other platforms carry it too: twins' shared tag names
    their image index (push writes it once for the pair; docs/release.md says how CI moves past it)."""
    platforms: Dict[str, set] = {}
    for r in out:
        for tag in r.body.get("tags") or []:
            platforms.setdefault(str(tag), set()).add(str(r.spec.platform or "linux/amd64"))
    for tag, _platform, err in write_once:
        if len(platforms.get(tag, ())) < 2:
            raise err
