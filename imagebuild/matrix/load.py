"""Load matrix.yaml: YAML with lines -> strict schema -> axes crossed (bake-style) -> merged -> Variants.

Inheritance, lowest first: `defaults`, the `templates` named in `extends` (in order, each after its own
`extends`), the variant entry's own keys, the value of each axis (in the order the axes are written), then
every `include` whose `match` fits the combination. `exclude` removes combinations. An include or exclude that
matches
nothing is an error (it is almost always a typo), and so are two variants with one name. The checks of a
variant's `checks_file` sit below all of these (`checksfile`).
Every error is a UserError with file, line and key; nothing here writes anything.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pydantic import BaseModel, ValidationError

from imagebuild.errors import UserError, did_you_mean
from imagebuild.matrix import schema
from imagebuild.matrix.checksfile import checks_layer
from imagebuild.matrix.guards import check_file_name, refuse_hostile
from imagebuild.matrix.resolve import Resolved, resolve
from imagebuild.matrix.yamlsrc import MDict, MList, copy_dict, file_of, line_of, load_file, merge
from imagebuild.variant import Variant

_FIELD_WORDS = sorted(
    {
        name
        for model in (
            schema.MatrixFile,
            schema.GroupSpec,
            schema.TemplateSpec,
            schema.VariantBody,
            schema.ComponentSpec,
            schema.SourceSpec,
            schema.BaseSpec,
            schema.TrainingSpec,
            schema.OptionsSpec,
            schema.IncludeSpec,
            schema.CheckSpec,
            schema.CheckMetadataSpec,
        )
        for name in model.model_fields
    }
    | set(schema.COMPONENT_NAMES)
)


def dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def validation_error(err: ValidationError, root: Any, file: str, prefix: Sequence[Any] = ()) -> UserError:
    """The first pydantic error as one UserError: plain words, the file:line of the key, the dotted key."""
    first = err.errors(include_url=False)[0]
    loc = [p for p in first["loc"] if p != "[key]"]
    is_key = "[key]" in first["loc"]
    kind = first["type"]
    value = first.get("input")
    hint = None
    if kind == "extra_forbidden":
        msg = f"unknown key '{loc[-1]}'"
        hint = did_you_mean(str(loc[-1]), _FIELD_WORDS)
    elif kind == "missing":
        msg = f"required key '{loc[-1]}' is missing"
    elif kind in ("string_type", "str_type"):
        msg = f"expected a string, got {_describe(value)}"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            hint = f'quote it: "{value}" (YAML reads 2.27 as a number and 1.10 as 1.1)'
    elif kind == "bool_type":
        msg = f"expected true or false, got {_describe(value)}"
    elif kind in ("list_type", "tuple_type"):
        msg = f"expected a list, got {_describe(value)}"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        msg = f"expected a mapping, got {_describe(value)}"
    elif kind in ("int_type", "int_parsing"):
        msg = f"expected a whole number, got {_describe(value)}"
    elif kind == "literal_error":
        if is_key and loc and loc[-1] == "components" or (is_key and "components" in loc):
            msg = f"unknown component '{value}' (known: {', '.join(schema.COMPONENT_NAMES)})"
            hint = did_you_mean(str(value), schema.COMPONENT_NAMES)
        else:
            msg = f"{_describe(value)} is not allowed: {first['msg'].replace('Input should be', 'expected')}"
    else:
        msg = first["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if is_key:
            msg = f"key {msg}"
    full = list(prefix) + list(loc)
    return UserError(
        msg,
        file=file_of(root, loc) or file,
        line=line_of(root, loc),
        key=dotted(full) or None,
        hint=hint,
    )


def validate(model: type, data: Any, root: Any, file: str, prefix: Sequence[Any] = ()) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, root, file, prefix) from None


def _at(node: Any, key: str) -> Optional[int]:
    return node.key_lines.get(key, node.line) if isinstance(node, MDict) else None


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
            raise UserError(
                "an axis needs at least one value", file=file, line=_at(axes, axis), key=f"{gkey}.axes.{axis}"
            )
    count = 1
    for axis in names:
        count *= len(axes[axis])
        if count > MAX_VARIANTS:
            raise UserError(
                f"the axes make more than {MAX_VARIANTS} combinations",
                file=file,
                line=_at(group, "axes"),
                key=f"{gkey}.axes",
                hint="split the matrix, or exclude what you do not build",
            )
    combos = [tuple(zip(names, values)) for values in itertools.product(*(list(axes[a]) for a in names))]
    if not names:
        combos = [()]

    def check_refs(sel: MDict, key: str) -> None:
        for axis, value in sel.items():
            if axis not in axes:
                raise UserError(
                    f"'{axis}' is not an axis of this variant (axes: {', '.join(names) or 'none'})",
                    file=file,
                    line=_at(sel, axis),
                    key=f"{key}.{axis}",
                )
            if value not in axes[axis]:
                raise UserError(
                    f"axis '{axis}' has no value '{value}' (values: {', '.join(axes[axis])})",
                    file=file,
                    line=_at(sel, axis),
                    key=f"{key}.{axis}",
                )

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
        raise UserError(
            "every combination is excluded", file=file, line=_at(group, "exclude"), key=f"{gkey}.exclude"
        )
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
    body = merge(body, copy_dict(body, []))
    body["channels"] = filled
    return body


def _merged(parts: Sequence[MDict], file: str, line: Optional[int]) -> MDict:
    body = MDict()
    body.file, body.line = file, line
    for part in parts:
        body = merge(body, part)
    return body


def expand(path: str, display: Optional[str] = None, platform: Optional[str] = None) -> List[Resolved]:
    """Parse, validate and expand a matrix file into merged variant bodies (not yet resolved).
    `platform` overrides every variant's (`build.py render --platform linux/arm64`)."""
    file = display or path
    write_once: List[Any] = []  # (tag, platform, the refusal) of tags neither content tags nor channels
    root = load_file(path, file)
    if not isinstance(root, MDict):
        raise UserError(
            "the matrix must be a mapping with a `variants:` list", file=file, line=getattr(root, "line", 1)
        )
    validate(schema.MatrixFile, root, root, file)
    defaults = root.get("defaults") or MDict()
    templates = root.get("templates") or MDict()
    check_file_name(file)
    out: List[Resolved] = []
    names: Dict[str, Tuple[str, Optional[int]]] = {}
    memo: Dict[str, Tuple[str, ...]] = {}
    checks_files: Dict[str, MDict] = {}
    for gi, group in enumerate(root["variants"]):
        gkey = f"variants[{gi}]"
        chain: List[MDict] = [defaults]
        applied: Dict[str, None] = {}
        for tname in group.get("extends") or []:
            for t in _template_chain(tname, templates, file, _at(group, "extends"), memo):
                applied.setdefault(t, None)
        chain += _template_bodies(list(applied), templates)
        chain.append(copy_dict(group, [k for k in group if k not in schema.GROUP_META_KEYS]))
        for combo in _combinations(group, file, gkey):
            parts = list(chain)
            for axis, value in combo:
                parts.append(group["axes"][axis][value])
            for inc in group.get("include") or []:
                if all(dict(combo).get(k) == v for k, v in inc["match"].items()):
                    parts.append(inc["set"])
            body = _merged(parts, file, group.line)
            layer = checks_layer(body, path, file, validate, checks_files)
            if layer is not None:
                body = _merged([layer] + parts, file, group.line)
            values = dict(combo)
            name = _fill(group["name"], values, file, _at(group, "name"), f"{gkey}.name")
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", name):
                raise UserError(
                    f"variant name {name!r} is not a valid name (lowercase, digits, . _ -)",
                    file=file,
                    line=_at(group, "name"),
                    key=f"{gkey}.name",
                )
            if name in names:
                raise UserError(
                    f"two variants are named '{name}' (the other is at line {names[name][1]})",
                    file=file,
                    line=_at(group, "name"),
                    key=f"{gkey}.name",
                    hint="add an axis placeholder to the name, e.g. name: cuda{cuda}",
                )
            names[name] = (file, _at(group, "name"))
            body = _filled_channels(body, dict(values, name=name), file)
            # tags may use {name}, the axis keys and {content_hash} (kept for the build to fill)
            if "tags" in body:
                tags = MList()
                tags.file, tags.line = body["tags"].file, body["tags"].line
                channels = [str(c) for c in body.get("channels") or [] if isinstance(c, str)]
                for ti, tag in enumerate(body["tags"]):
                    at = body["tags"].item_lines[ti]
                    filled = _fill(
                        tag, dict(values, name=name, content_hash=_HASH_MARK), file, at, f"tags[{ti}]"
                    )
                    try:
                        tags.append(content_tag_or_channel(filled, channels, file, at, f"tags[{ti}]"))
                    except WriteOnceTag as err:  # unless a platform twin shares it (below): then it names
                        tags.append(filled)  # the twins' image index, as push writes it
                        write_once.append((filled, platform or body.get("platform"), err))
                    tags.item_lines.append(at)
                body = merge(body, copy_dict(body, []))
                body["tags"] = tags
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
            out.append(Resolved(name, body, spec, tuple(combo), file, _at(group, "name")))
    _refuse_unshared(write_once, out)
    return out


def _refuse_unshared(write_once: List[Any], out: List[Resolved]) -> None:
    """A write-once tag is refused unless variants of other platforms carry it too: twins' shared tag names
    their image index (push writes it once for the pair; docs/release.md says how CI moves past it)."""
    platforms: Dict[str, set] = {}
    for r in out:
        for tag in r.body.get("tags") or []:
            platforms.setdefault(str(tag), set()).add(str(r.spec.platform or "linux/amd64"))
    for tag, _platform, err in write_once:
        if len(platforms.get(tag, ())) < 2:
            raise err


def load(
    path: str, only: Sequence[str] = (), display: Optional[str] = None, platform: Optional[str] = None
) -> List[Variant]:
    """The variants of a matrix file, resolved and checked (compat rules, env policy); `only` filters;
    `platform` renders every variant for that platform instead of its own."""

    file = display or path
    merged = expand(path, file, platform)
    known = [m.name for m in merged]
    for want in only:
        if want not in known:
            raise UserError(
                f"no variant named '{want}' in {file}",
                key="--variant",
                hint=did_you_mean(want, known) or f"variants: {', '.join(known)}",
            )
    base_dir = os.path.dirname(os.path.abspath(path))
    return [resolve(m, base_dir) for m in merged if not only or m.name in only]
