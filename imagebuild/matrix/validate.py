"""The matrix's schema errors in the user's words: the first pydantic error as one UserError naming the file,
the line of the key (yamlsrc keeps lines) and the dotted key, with a did-you-mean for a misspelt field.

One module of its own so the matrix file, a `checks_file` and each expanded variant body are checked by the
same call, in the order the load pass reaches them, without handing a callback around.
"""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from imagebuild.errors import UserError, did_you_mean
from imagebuild.jsonfile import dotted
from imagebuild.matrix import schema
from imagebuild.matrix.yamlsrc import where

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
    return UserError(msg, key=dotted(full) or None, hint=hint, **where(root, loc, file))


def validate(model: type, data: Any, root: Any, file: str, prefix: Sequence[Any] = ()) -> BaseModel:
    """`data` as `model`, or the first error as a UserError at its file:line:key."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, root, file, prefix) from None
