"""Pydantic's validation errors as lines a user can act on.

One line per error: where it is in the file (`provider 'x' (providers[2]), field 'timout'`),
what was expected, what was given, and for an unknown field the closest known one
(`unknown field (did you mean 'timeout'?)`).

Pydantic's error locations also name what it tried on the way to a field: the member of a union
(the tag `webhook`, the type `list[str]`) and, in some versions, a validator's wrapper. Those
names are pydantic's business, not the user's, and they change between versions; `locate` drops
them by walking the location beside the model's own fields instead of matching their spelling.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

Loc = tuple[str | int, ...]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the choice closest to `word`, or "" when none is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def where(loc: tuple[Any, ...], data: Any) -> str:
    """`provider 'x' (providers[2]), field 'timeout.read'` from a location in the file's data."""
    if len(loc) >= 2 and loc[0] == "providers" and isinstance(loc[1], int):
        name = None
        if isinstance(data, dict):
            items = data.get("providers")
            if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
                name = items[loc[1]].get("name")
        who = f"provider {name!r} (providers[{loc[1]}])" if name else f"providers[{loc[1]}]"
        rest = ".".join(str(x) for x in loc[2:])
        return f"{who}, field {rest!r}" if rest else who
    if len(loc) >= 2 and loc[0] == "defaults":
        return f"defaults, field {'.'.join(str(x) for x in loc[1:])!r}"
    return f"field {'.'.join(str(x) for x in loc)!r}" if loc else "top level"


def describe(
    exc: ValidationError, data: Any, model: type[BaseModel], prefix: tuple[str, ...] = ()
) -> str:
    """Readable lines from the errors of validating `data` as `model`: where, what was
    expected, what was given. `prefix` is where the validated value sits in the file (the
    errors' locations are relative to it)."""
    lines = []
    for err in exc.errors(include_url=False):
        path, holder = locate(err["loc"], model)
        loc = prefix + path
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = [f.alias or k for k, f in holder.model_fields.items()] if holder else []
            msg = f"unknown field{did_you_mean(loc[-1], known)}"
        elif err["type"] not in ("value_error", "missing") and "input" in err:
            given = err["input"]
            if not isinstance(given, Mapping | list):
                msg = f"{msg} (got {given!r})"
        lines.append(f"{where(loc, data)}: {msg}")
    return "; ".join(lines)


def locate(loc: Loc, model: type[BaseModel]) -> tuple[Loc, type[BaseModel] | None]:
    """(the fields, list indexes and mapping keys of an error location, the model that holds
    its last part). A part where `model`'s structure has a union names the member pydantic
    tried: it is dropped, and the walk goes on in a member model whose tag it is. A part that
    is no field of the model it stands in is a wrapper's name, dropped too, unless it is the
    last (an unknown field)."""
    path: list[str | int] = []
    holder: type[BaseModel] | None = None
    kind: Any = model
    for i, part in enumerate(loc):
        kind = _bare(kind)
        members = _members(kind)
        if members:
            kind = _tagged(members, part)
            continue
        holder = kind if _is_model(kind) else None
        if holder is not None:
            field = holder.model_fields.get(str(part)) or next(
                (f for f in holder.model_fields.values() if f.alias == part), None
            )
            if field is None and i < len(loc) - 1:
                continue
            kind = field.annotation if field else None
        else:
            kind = _item(kind)
        path.append(part)
    return tuple(path), holder


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _bare(kind: Any) -> Any:
    """`kind` without `Annotated[...]` and without an optional's `None`."""
    while True:
        if get_origin(kind) is Annotated:
            kind = get_args(kind)[0]
        elif _is_union(kind) and type(None) in get_args(kind) and len(get_args(kind)) == 2:
            kind = next(a for a in get_args(kind) if a is not type(None))
        else:
            return kind


def _is_union(kind: Any) -> bool:
    return get_origin(kind) in (Union, types.UnionType)


def _members(kind: Any) -> tuple[Any, ...]:
    """The members of a union that pydantic tries one by one (it names each in locations)."""
    return tuple(_bare(a) for a in get_args(kind)) if _is_union(kind) else ()


def _tagged(members: tuple[Any, ...], tag: str | int) -> Any:
    """The member model whose literal field (its discriminator) has the value `tag`; None
    when no member is (a plain union names its members by type, not by tag)."""
    for member in members:
        if _is_model(member) and any(
            get_origin(f.annotation) is Literal and tag in get_args(f.annotation)
            for f in member.model_fields.values()
        ):
            return member
    return None


def _item(kind: Any) -> Any:
    """The type of a list's items or a mapping's values; None for anything else."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None
