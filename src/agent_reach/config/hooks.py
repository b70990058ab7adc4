"""User hooks (protocol §2.3): `preprocess_hook` and `post_process_hook`, loaded once with the
config from `module:function` or `path/to/file.py:function` (a relative path is relative to
the config file's folder).

Hooks run in-process and are trusted code: the config file is the trust boundary.
- `preprocess_hook(raw) -> raw'`: the provider's parsed JSON in, JSON out, before validation.
- `post_process_hook(raw) -> dict`: a full transform to an OpenAI `chat.completion` (at least
  `choices[0].message.content`); agent-reach fills in what it leaves out.
A hook that raises, or returns the wrong type, ends the attempt with `hook_error`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

Hook = Callable[[Any], Any]


class HookError(Exception):
    """A hook raised or returned the wrong type (the attempt's reason is `hook_error`)."""


def load(ref: str, base_dir: Path) -> Hook:
    """The function a hook reference names; ValueError says why it cannot be loaded."""
    target, _, name = ref.rpartition(":")
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise ValueError(f"no file {path}")
        module_name = "agent_reach_hook_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {path} as Python")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ValueError(f"{path} failed to load: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ValueError(f"cannot import module {target!r}: {exc}") from exc
    func = getattr(module, name, None)
    if not callable(func):
        raise ValueError(f"{target} has no function {name!r}")
    return func  # type: ignore[no-any-return]


def run(hook: Hook, raw: Any, which: str, want: type | tuple[type, ...]) -> Any:
    """Call a hook; `HookError` when it raises or returns something other than `want`."""
    try:
        out = hook(raw)
    except Exception as exc:
        raise HookError(f"{which} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, want):
        raise HookError(f"{which} returned {type(out).__name__}, not a JSON object")
    return out
