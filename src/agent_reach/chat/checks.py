"""What the fields of a request must be, as small values: the words in which each inbound API's
field table is written (Chat Completions in `request`, Responses and Messages in their
dialects). Pure.

A `Check` accepts a value or refuses it with a `RequestError` (a 400) whose `param` is the
field's path as OpenAI writes it (`messages[2].content[0].text`, `temperature`) and whose
message says what the field must be and, briefly, what it was. Checks compose: `shape` (an
object and its fields), `array_of`, `either`, and `tagged` (objects told apart by a `type` or
`role`). Null means "not given" for a field of an object; a field listed as required must be
there and not null. Fields a table does not name pass unchecked: the APIs add fields over time,
and a request is never refused for one this version does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import RequestError, escaped, quoted

INT32_MAX = 2**31 - 1
_SHOWN = 50  # characters of a refused value quoted in the message


@dataclass(frozen=True, slots=True)
class Check:
    """What one value must be. `ok` says whether it passes, all the way down, and builds no
    path on the way (the hot path: a request that passes costs a walk and nothing else);
    `test` accepts the value itself, `expected` says what that is in an error message, and
    `inner` (if any) finds what fails inside a value that passed `test`, naming its path."""

    ok: Callable[[Any], bool]
    test: Callable[[Any], bool]
    expected: str
    inner: Callable[[Any, str], None] | None = None

    def __call__(self, value: Any, where: str) -> None:
        """`RequestError` naming `where` (or a path under it) when `value` does not pass."""
        if not self.test(value):
            raise refused(where, f"must be {self.expected}", value)
        if self.inner is not None:
            self.inner(value, where)


def leaf(test: Callable[[Any], bool], expected: str) -> Check:
    """A check of the value itself, with nothing inside it to check."""
    return Check(test, test, expected)


def refused(where: str, problem: str, value: Any = None) -> RequestError:
    """The 400 for the field at `where`: `'where' problem (got …)`."""
    got = _shown(value)
    return RequestError(f"'{where}' {problem}" + (f" (got {got})" if got else ""), param=where)


def _shown(value: Any) -> str:
    """A refused value as an error message may show it: short, quoted, never a whole object."""
    if isinstance(value, str):
        return quoted(value, _SHOWN)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return escaped(str(value), _SHOWN)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return ""  # None: the field is missing


def check_fields(body: Mapping[str, Any], checks: Mapping[str, Check], prefix: str = "") -> None:
    """`RequestError` naming the first field of `body` that fails its check (its path is
    `prefix` + its name); fields without a check and null values pass."""
    if not _fields_ok(body, checks):
        for name, value in body.items():
            check = checks.get(name)
            if check is not None and value is not None and not check.ok(value):
                check(value, prefix + name)


def _fields_ok(body: Mapping[str, Any], checks: Mapping[str, Check]) -> bool:
    for name, value in body.items():  # a request has fewer fields than there are checks
        check = checks.get(name)
        if check is not None and value is not None and not check.ok(value):
            return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(low: int, high: int) -> Check:
    """An integer within [low, high] (not a boolean, not a float such as 1e30)."""
    return leaf(
        lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
        f"an integer from {low} to {high}",
    )


def number(low: float, high: float) -> Check:
    """A number within [low, high] (NaN and infinities are outside every range)."""
    return leaf(lambda v: _is_number(v) and low <= v <= high, f"a number from {low:g} to {high:g}")


def one_of(*values: str) -> Check:
    """One of the strings `values`."""
    return leaf(lambda v: isinstance(v, str) and v in values, "one of " + ", ".join(values))


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def shape(
    fields: Mapping[str, Check], required: tuple[str, ...] = (), expected: str = "an object"
) -> Check:
    """An object whose `fields` pass their checks; those named in `required` must be given."""

    def ok(value: Any) -> bool:
        if not isinstance(value, dict):
            return False
        for name in required:
            if value.get(name) is None:
                return False
        return _fields_ok(value, fields)

    def inner(value: dict[str, Any], where: str) -> None:
        for name in required:
            if value.get(name) is None:
                raise refused(f"{where}.{name}", f"is required: {fields[name].expected}")
        check_fields(value, fields, f"{where}.")

    return Check(ok, _is_object, expected, inner)


def array_of(item: Check, expected: str, *, nonempty: bool = False) -> Check:
    """An array (non-empty if `nonempty`) whose items pass `item`, named `where[i]`."""

    item_ok = item.ok

    def test(value: Any) -> bool:
        return isinstance(value, list) and (bool(value) or not nonempty)

    def ok(value: Any) -> bool:
        return test(value) and all(map(item_ok, value))

    def inner(value: list[Any], where: str) -> None:
        for i, v in enumerate(value):
            if not item_ok(v):
                item(v, f"{where}[{i}]")

    return Check(ok, test, expected, inner)


def either(*checks: Check, expected: str) -> Check:
    """A value that passes the first of `checks` whose `test` it passes."""

    def ok(value: Any) -> bool:
        for check in checks:
            if check.test(value):
                return check.ok(value)
        return False

    def inner(value: Any, where: str) -> None:
        for check in checks:
            if check.test(value):
                if check.inner is not None:
                    check.inner(value, where)
                return

    return Check(ok, lambda v: any(c.test(v) for c in checks), expected, inner)


def tagged(
    key: str,
    variants: Mapping[str, Check],
    expected: str,
    *,
    default: str | None = None,
    closed: bool = False,
) -> Check:
    """An object told apart by its `key` field (missing: `default`): the variant's check.
    A tag with no variant passes (a `type` this version does not know yet) unless `closed`."""
    names = ", ".join(variants)

    def ok(value: Any) -> bool:
        if not isinstance(value, dict):
            return False
        tag = value.get(key, default)
        variant = variants.get(tag) if isinstance(tag, str) else None
        if variant is not None:
            return variant.ok(value)
        return isinstance(tag, str) and not closed

    def inner(value: dict[str, Any], where: str) -> None:
        tag = value.get(key, default)
        variant = variants.get(tag) if isinstance(tag, str) else None
        if variant is not None:
            variant(value, where)
        elif closed:
            raise refused(f"{where}.{key}", f"must be one of {names}", tag)
        elif not isinstance(tag, str):
            raise refused(f"{where}.{key}", "must be a string", tag)

    return Check(ok, _is_object, expected, inner)


BOOLEAN = leaf(lambda v: isinstance(v, bool), "true or false")
STRING = leaf(lambda v: isinstance(v, str), "a string")
NAME = leaf(lambda v: isinstance(v, str) and v != "", "a non-empty string")
OBJECT = leaf(_is_object, "an object")
INT64_MAX = 2**63 - 1
INT64 = integer(-(2**63), INT64_MAX)  # any integer JSON carries here
TOKENS = integer(1, INT64_MAX)  # a count of tokens the schema gives no range but "at least 1"
STRINGS = array_of(STRING, "an array of strings")
