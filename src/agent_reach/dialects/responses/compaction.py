"""Compaction any provider can take (protocol §10.1): a conversation summarized by the route's
own model, handed to the client as one `compaction` item whose `encrypted_content` is an
envelope of ours (`seal`), and read back into the conversation as a user message where the item
stood when it returns (`expanded`), whichever provider gets the request then.

Codex asks for one by `POST /v1/responses/compact` or, with remote compaction v2, a
`{"type": "compaction_trigger"}` as the last input item of a Responses request (`triggered`);
the summary is asked for with `PROMPT` after the conversation (`summary_request`).

The envelope: `MARK`, then the base64url of the zlib of `{"v", "summary", "replaced"}` (how many
input items the summary stands for), a dot, and the base64url of a keyed BLAKE2b of those bytes
under the client's seal key (`guard`: derived from its client key, never stored), so that a
client can neither alter an item nor make one that another key's conversation would take: an
item of ours whose check fails is a 400 naming it. An item that is not ours (`foreign`) goes to
a `format: responses` provider as it came, and is a 400 for a route with none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import zlib
from typing import Any

import orjson

from ...core.errors import RequestError
from .answer import new_id

TRIGGER = "compaction_trigger"
MARK = "agent-reach.compaction.v1."  # what an `encrypted_content` of ours begins with
_MAC_BYTES = 16
# What the model is asked, after the conversation, for the summary that replaces it.
PROMPT = (
    "Your context is about to be compacted: everything above will be replaced by what you "
    "write now, and the work will continue from it alone. Write a handoff summary for "
    "yourself, in the conversation's language, with: the user's requests and constraints, in "
    "their own words where they matter; what has been done so far (files read or changed, "
    "commands run and what they showed, decisions taken and why); what is left, and the next "
    "step; any identifiers, paths, names and values the work still needs. Write only the "
    "summary, no preamble, and call no tool."
)
# How a summary comes back into the conversation, before the turns that followed it.
HEADER = (
    "The conversation so far was compacted into this summary (written by the assistant "
    "for itself); continue the work from it.\n\n"
)


def _mac(payload: bytes, key: bytes) -> bytes:
    return hashlib.blake2b(payload, key=key, digest_size=_MAC_BYTES).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(summary: str, replaced: int, key: bytes) -> dict[str, Any]:
    """The one `compaction` output item of `summary`, sealed with `key`."""
    payload = zlib.compress(orjson.dumps({"v": 1, "summary": summary, "replaced": replaced}), 6)
    content = f"{MARK}{_b64(payload)}.{_b64(_mac(payload, key))}"
    return {"type": "compaction", "id": new_id("cmp"), "encrypted_content": content}


def opened(content: str, key: bytes, where: str) -> str:
    """The summary sealed in one of our items' `encrypted_content` (it begins with `MARK`); a
    400 naming `where` (the item's place in `input`) when it is not sealed with `key`."""
    packed, _, mac = content[len(MARK) :].rpartition(".")
    try:
        payload, given = _unb64(packed), _unb64(mac)
        canonical = _b64(payload) == packed and _b64(given) == mac  # no other spelling
        good = canonical and hmac.compare_digest(given, _mac(payload, key))
        record = orjson.loads(zlib.decompress(payload)) if good else None
    except (binascii.Error, ValueError, zlib.error, orjson.JSONDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("summary"), str):
        raise RequestError(
            f"{where}: the compaction item's encrypted_content was changed, or was made for "
            "another client key",
            param="input",
        )
    summary: str = record["summary"]
    return summary


def is_trigger(value: Any) -> bool:
    """Whether an input item is the `compaction_trigger`."""
    return isinstance(value, dict) and value.get("type") == TRIGGER


def triggered(body: dict[str, Any]) -> bool:
    """Whether a Responses request asks for compaction (its last input item is the trigger)."""
    given = body.get("input")
    return isinstance(given, list) and bool(given) and is_trigger(given[-1])


def expanded(body: dict[str, Any], key: bytes) -> dict[str, Any]:
    """`body` with each `compaction` item of ours in its input as the user message of its
    summary (checked with `key`; a 400 when the check fails); an item that is not ours (a
    provider's own) is left as it came (`foreign`); `body` itself when it has none of ours."""
    given = body.get("input")
    if not isinstance(given, list) or not any(_ours(i) for i in given):
        return body
    items = [
        _summary(opened(i["encrypted_content"], key, f"input[{n}]")) if _ours(i) else i
        for n, i in enumerate(given)
    ]
    return {**body, "input": items}


def foreign(body: dict[str, Any]) -> int | None:
    """The place in `body`'s input of its first `compaction` item that is not ours (one only
    the `format: responses` provider that made it can read), or None."""
    given = body.get("input")
    if isinstance(given, list):
        for n, item in enumerate(given):
            if _compaction(item) and not _ours(item):
                return n
    return None


def not_ours(n: int) -> RequestError:
    """The 400 for `foreign` item `n` in a request no `format: responses` provider may take."""
    return RequestError(
        f"input[{n}] is a compaction item agent-reach did not make, and no provider of the "
        "route speaks the Responses API to read it (start the conversation again, or send it "
        "where it was made)",
        param="input",
    )


def _summary(summary: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": HEADER + summary}


def _ours(item: Any) -> bool:
    content = item.get("encrypted_content") if _compaction(item) else None
    return isinstance(content, str) and content.startswith(MARK)


def _compaction(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "compaction"


def summary_request(body: dict[str, Any]) -> dict[str, Any]:
    """The Responses request that asks the route's model for the summary of `body`'s
    conversation (already `expanded`; its trigger left out): the conversation, then `PROMPT`;
    its tools kept (so that the calls in it are understood) but none to be called; not
    streamed, not stored."""
    given = body.get("input")
    if isinstance(given, str):
        items: list[Any] = [{"type": "message", "role": "user", "content": given}]
    else:
        items = [i for i in given or () if not is_trigger(i)]
    items.append({"type": "message", "role": "user", "content": PROMPT})
    keep = ("model", "instructions", "tools", "agent_reach")
    out: dict[str, Any] = {k: body[k] for k in keep if k in body}
    out["input"] = items
    out["store"] = False
    if out.get("tools"):
        out["tool_choice"] = "none"
    return out
