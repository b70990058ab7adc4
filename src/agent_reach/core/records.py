"""`record`: the frozen dataclass of the values the engine makes for every request (the request,
its attempts, outcomes, events, the turn's facts and actions).

Frozen where it is checked, mypy strict in CI: no code of ours assigns to a field. At run time
the fields are set by a plain `__init__`: a frozen dataclass's calls `object.__setattr__` once
per field, several times the cost (docs/decisions.md), and a request makes some twenty of
them. Equal values hash alike, as frozen ones do (`unsafe_hash`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
