"""The judge of a provider's answer (protocol §4 step 4): whether a whole answer is a good one,
and what the client gets of it (`answer`); whether a health check passed (`health`). In
order: a non-2xx status is classified by status and error body (§5); an HTML page or a body
that is not JSON is `schema_mismatch`; an error inside a 2xx body is classified by its code and
words; then the hooks, normalization (§7) and validation (§8). An answer that needs no change
comes back as a `dialects.Verbatim`, whose bytes the face sends as they are."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from .. import dialects
from ..chat import completion, validation
from ..config import hooks
from ..config.hooks import HookError
from ..core.outcomes import OK, ErrorInfo, Outcome, classify, filtered, mismatch
from ..core.routing import Health
from ..core.trace import Reason
from ..dialects import Context, Mismatch, Shape, Verbatim, artifacts
from .prepared import PreparedProvider, excerpt_of

_MARKUP = re.compile(rb"\s*<")  # an answer that is a page (no copy of a big one is made)


def answer(
    prepared: PreparedProvider,
    *,
    status: int,
    content_type: str,
    raw: bytes,
    headers: Mapping[str, str],
    model: str,
    requested: str | None,
    raw_response: bool,
    now: float,
) -> tuple[Outcome, dict[str, Any] | None]:
    """The outcome of a complete (non-streamed) answer, and the response to return (its
    secrets redacted: an answer that echoes its key goes out with `***`)."""
    raw = prepared.redactor.body(raw) if 200 <= status < 300 else raw
    failed, body = parsed(prepared, status, content_type, raw, headers, now)
    if failed is not None:
        return failed, None
    # Most answers are plain: their own normalization, nothing in them to walk.
    plain = not raw_response and not prepared.has_hooks
    exact = prepared.dialect.plain(body, prepared.shape) if plain else None
    if exact is None:
        try:
            body, normalized = _transform(prepared, body, model, int(now))
        except HookError as exc:
            return Outcome(Reason.HOOK_ERROR, status, str(exc)), None
        except Mismatch as exc:
            return mismatch(str(exc), status), None
    else:
        normalized = body
    if completion.filtered(normalized["choices"]):
        return filtered(status), None
    accepted = {m for m in (requested, model) if m}
    problem = (exact is None and completion.malformed(normalized)) or validation.validate(
        prepared.spec.validation, normalized, body, accepted
    )
    if problem:
        return mismatch(problem, status), None
    if raw_response:  # as the provider gave it: its artifacts tagged as its own
        if not artifacts.may_hold(raw):
            return Outcome(OK.reason, status), _verbatim(prepared, body, raw)
        return Outcome(OK.reason, status), artifacts.tagged(body, prepared.origin)
    if exact or (exact is None and normalized == body):  # the bytes say it already
        return Outcome(OK.reason, status), _verbatim(prepared, normalized, raw)
    return Outcome(OK.reason, status), normalized


def parsed(
    prepared: PreparedProvider,
    status: int,
    content_type: str,
    raw: bytes,
    headers: Mapping[str, str],
    now: float,
) -> tuple[Outcome | None, Any]:
    """The JSON of a 2xx answer, or why it is none: a non-2xx status (by status and error
    body), an HTML page or a body that is no JSON, an error inside a 2xx body."""
    if not 200 <= status < 300:
        return _refusal(prepared, status, raw, headers, now), None
    if "html" in content_type or _MARKUP.match(raw):
        return mismatch(f"HTML page ({content_type or 'no content type'})", status), None
    try:
        body = dialects.base.loads(raw)
    except Mismatch as exc:
        return mismatch(str(exc), status), None
    error = prepared.dialect.error_of(body)
    if error is not None:
        return _classify(prepared, status=status, error=error, now=now), None
    return None, body


def _verbatim(prepared: PreparedProvider, body: Any, raw: bytes) -> Any:
    """`body` with the bytes it was read from, for the face to send as they are; unless
    a `preprocess_hook` made it (then they are not what it says)."""
    if prepared.preprocess is not None or not isinstance(body, dict):
        return body
    return Verbatim.of(body, raw)


def _transform(
    prepared: PreparedProvider, body: Any, model: str, created: int
) -> tuple[Any, dict[str, Any]]:
    """(raw body after `preprocess_hook`, normalized completion): the dialect normalizes,
    unless a `post_process_hook` makes the completion itself."""
    if prepared.preprocess is not None:
        body = hooks.run(prepared.preprocess, body, "preprocess_hook", (dict, list))
    if prepared.postprocess is None:
        return body, prepared.dialect.normalize(body, prepared.context(model, created))
    made = hooks.run(prepared.postprocess, body, "post_process_hook", dict)
    ctx = Context(model, created, Shape("choices", "message.content"))
    return body, dialects.get("openai").normalize(made, ctx)


def health(
    prepared: PreparedProvider, *, status: int, content_type: str, raw: bytes, now: float, ms: float
) -> Health:
    """A health check passes on 2xx with a JSON content type (protocol §6); a body that lists
    models (`data[].id`, `models[].name`) also says which models it serves."""
    if not 200 <= status < 300:
        return Health(False, now, _refusal(prepared, status, raw, None, now), ms=ms)
    if "json" not in content_type:
        what = f"not JSON ({content_type or 'no content type'})"
        return Health(False, now, mismatch(what, status), ms=ms)
    body = _json_or_none(raw)
    return Health(True, now, OK, _listed_models(body), ms=ms)


def _refusal(
    prepared: PreparedProvider,
    status: int,
    raw: bytes,
    headers: Mapping[str, str] | None,
    now: float,
) -> Outcome:
    """The outcome of a non-2xx answer, refined by the error in its body."""
    body = _json_or_none(raw)
    error = prepared.dialect.error_of(body) if body is not None else None
    if error is None and raw.strip():
        error = ErrorInfo(excerpt_of(raw))
    return _classify(prepared, status=status, error=error, headers=headers, now=now)


def _classify(
    prepared: PreparedProvider,
    *,
    status: int | None,
    error: ErrorInfo | None,
    now: float,
    headers: Mapping[str, str] | None = None,
) -> Outcome:
    """`outcomes.classify` with this provider's `rate_limit_window_s`."""
    return classify(
        status=status, error=error, headers=headers, now=now, window_s=prepared.rate_limit_window_s
    )


def _json_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        return None


def _listed_models(body: Any) -> frozenset[str] | None:
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("data"), list):
        return frozenset(m["id"] for m in body["data"] if isinstance(m, dict) and "id" in m)
    if isinstance(body.get("models"), list):
        names: set[str] = set()
        for m in body["models"]:
            if isinstance(m, dict):
                names.update(str(m[k]) for k in ("name", "model") if k in m)
        return frozenset(names)
    return None
