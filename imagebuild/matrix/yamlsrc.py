"""YAML with line numbers: every mapping remembers the line of each key, every list the line of each item.

Why: a user's mistake must be reported as `matrix.yaml:42: key 'components.nccl.version'`, also after
defaults, templates and axes have been merged, so lines travel with the values (see `merge`).
Duplicate keys, recursive aliases and alias bombs are refused rather than silently accepted.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import yaml

from imagebuild.errors import UserError
from imagebuild.safefile import read_text

MAX_NODES = 200_000  # an alias bomb expands beyond this; a real matrix is far below
MAX_FILE_BYTES = 4 * 1024 * 1024  # the largest matrix in the field is a few dozen KiB
MAX_INT = 2**63 - 1  # no size, count or version part is larger; Python's 4300-digit guard is a ValueError


class MDict(dict):
    """A mapping that knows its file, its own line and the line of each of its keys."""

    file: Optional[str] = None
    line: Optional[int] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: Dict[Any, int] = {}


class MList(list):
    """A list that knows its file, its own line and the line of each item."""

    file: Optional[str] = None
    line: Optional[int] = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines: List[int] = []


Node = Union[MDict, MList, Any]


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Builder:
    def __init__(self, loader: yaml.SafeLoader, file: str) -> None:
        self.loader = loader
        self.file = file
        self.count = 0
        self.active: set = set()

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        """A scalar; numbers beyond 64 bits are refused (a 4301-digit integer is a ValueError in PyYAML)."""
        if node.tag == "tag:yaml.org,2002:int" and len(node.value) > 40:
            raise UserError("number too large", file=self.file, line=_line(node))
        try:
            value = self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError):
            what = f"value {node.value[:40]!r} cannot be read"
            raise UserError(what, file=self.file, line=_line(node)) from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise UserError("number too large (more than 64 bits)", file=self.file, line=_line(node))
        return value

    def build(self, node: yaml.Node) -> Node:
        self.count += 1
        if self.count > MAX_NODES:
            raise UserError(
                "document expands to too many values (alias bomb?)", file=self.file, line=_line(node)
            )
        if id(node) in self.active:
            raise UserError("recursive alias", file=self.file, line=_line(node))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                out = MList()
                out.file, out.line = self.file, _line(node)
                for item in node.value:
                    out.append(self.build(item))
                    out.item_lines.append(_line(item))
                return out
            if isinstance(node, yaml.MappingNode):
                self.loader.flatten_mapping(node)  # YAML merge keys (<<) as PyYAML does
                out = MDict()
                out.file, out.line = self.file, _line(node)
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode):
                        raise UserError("a key must be a plain string", file=self.file, line=_line(key_node))
                    key = self._scalar(key_node)
                    if not isinstance(key, str):
                        raise UserError(
                            f'key {key!r} must be a string (quote it: "{key}")',
                            file=self.file,
                            line=_line(key_node),
                            key=str(key),
                        )
                    if key in out:
                        raise UserError(
                            "duplicate key (the later one would silently win)",
                            file=self.file,
                            line=_line(key_node),
                            key=key,
                        )
                    out[key] = self.build(value_node)
                    out.key_lines[key] = _line(key_node)
                return out
        finally:
            self.active.discard(id(node))
        raise UserError("unsupported YAML node", file=self.file, line=_line(node))


def loads(text: str, file: str) -> Node:
    """Parse one YAML document into MDict/MList/scalars; any YAML problem is a UserError with its line."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            raise UserError("the file is empty", file=file, line=1)
        return _Builder(loader, file).build(node)
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1 if isinstance(err.position, int) else None
        raise UserError(
            f"invalid YAML (character {err.character!r} is not allowed)", file=file, line=line
        ) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        msg = " ".join(p for p in (err.context, err.problem) if p) or "invalid YAML"
        raise UserError(f"invalid YAML ({msg})", file=file, line=line) from None
    except yaml.YAMLError as err:
        raise UserError(f"invalid YAML ({err})", file=file) from None
    except RecursionError:
        raise UserError("YAML nested too deeply", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: str, display: Optional[str] = None) -> Node:
    """Read and parse a YAML file; unreadable or non-UTF-8 files are user errors too."""
    name = display or path
    try:
        text = read_text(path, MAX_FILE_BYTES)  # a FIFO, a device or a huge file is refused, not read
    except UserError as err:
        err.file = name
        raise
    return loads(text, name)


def line_of(root: Node, loc: Sequence[Any]) -> Optional[int]:
    """The line of the deepest part of `loc` that exists under `root` (a pydantic error location)."""
    line = getattr(root, "line", None)
    node = root
    for part in loc:
        if isinstance(node, MDict) and part in node:
            line = node.key_lines.get(part, line)
            node = node[part]
        elif isinstance(node, MList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        else:
            break
    return line


def file_of(root: Node, loc: Sequence[Any]) -> Optional[str]:
    """The file the deepest existing part of `loc` came from (merged trees mix files)."""
    file = getattr(root, "file", None)
    node = root
    for part in loc:
        if isinstance(node, (MDict, MList)):
            file = node.file or file
        if isinstance(node, MDict) and part in node:
            node = node[part]
        elif isinstance(node, MList) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            break
    if isinstance(node, (MDict, MList)) and node.file:
        file = node.file
    return file


def where(root: Node, loc: Sequence[Any], file: str, line: Optional[int] = None) -> Dict[str, Any]:
    """The `file=` and `line=` of a UserError about `loc` under `root`: the deepest existing part's, else
    `file` (and `line` where one is given), so every stage names the place the same way."""
    found = line_of(root, loc)
    return {"file": file_of(root, loc) or file, "line": found if line is None else found or line}


def copy_dict(src: MDict, keys: Iterable[str]) -> MDict:
    """A new MDict holding only `keys` of `src`, lines kept."""
    out = MDict()
    out.file, out.line = src.file, src.line
    for k in keys:
        if k in src:
            out[k] = src[k]
            out.key_lines[k] = src.key_lines.get(k, src.line or 0)
    return out


def merge(base: Node, patch: Node) -> Node:
    """Deep merge, patch wins: mappings merge key by key, lists and scalars replace, `null` deletes a key.

    The result is a new tree; each key keeps the line (and file) of the side that supplied it.
    """
    if not (isinstance(base, MDict) and isinstance(patch, MDict)):
        return patch
    out = MDict()
    out.file, out.line = patch.file or base.file, patch.line or base.line
    for k, v in base.items():
        out[k] = v
        out.key_lines[k] = base.key_lines.get(k, base.line or 0)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
            out.key_lines.pop(k, None)
            continue
        out[k] = merge(out[k], v) if k in out else v
        out.key_lines[k] = patch.key_lines.get(k, patch.line or 0)
    return out


def merge_all(parts: Sequence[Node], file: Optional[str], line: Optional[int]) -> MDict:
    """`merge` of `parts` in order, lowest first, over an empty mapping of `file` at `line`."""
    out = MDict()
    out.file, out.line = file, line
    for part in parts:
        out = merge(out, part)
    return out


def with_key(node: MDict, key: str, value: Node) -> MDict:
    """A new mapping: `node` with `key` set to `value`, lines kept (the tree other variants share stays)."""
    out = merge(node, copy_dict(node, []))
    out[key] = value
    return out
