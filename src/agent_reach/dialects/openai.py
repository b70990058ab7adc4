"""The OpenAI chat completions format, spoken by most providers (DeepSeek, Zhipu, Moonshot,
DashScope compatible mode, Ollama `/v1`, vLLM, …). Tolerates their quirks: Zhipu's missing
`object`, Moonshot's usage inside `choices[0]`, DeepSeek's `: keep-alive` lines and
`reasoning_content`, content given as a list of parts.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..chat import completion
from ..chat.checks import INT64_MAX
from .base import Context, Decoder, Dialect, Mismatch, Shape, Verbatim, loads
from .convert import content_at, model_of, object_at, put_max_tokens, text_of, turns_last

_NOT_FORWARDED = frozenset(
    {"agent_reach", "model", "stream", "stream_options", "max_tokens", "max_completion_tokens"}
)


# Cached prompt tokens in a provider's own words, reported as OpenAI's
# `prompt_tokens_details.cached_tokens`: DeepSeek's and Moonshot's.
_CACHED = ("prompt_cache_hit_tokens", "cached_tokens")


def _usage(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] | None = completion.usage(
        value.get("prompt_tokens"), value.get("completion_tokens"), value.get("total_tokens")
    )
    if out is not None:
        for key in ("prompt_tokens_details", "completion_tokens_details"):
            if isinstance(value.get(key), dict):
                out[key] = value[key]
        details = object_at(out, "prompt_tokens_details")
        cached = next((value[k] for k in _CACHED if isinstance(value.get(k), int)), None)
        if cached is not None and not isinstance(details.get("cached_tokens"), int):
            out["prompt_tokens_details"] = {**details, "cached_tokens": cached}
    return out


def _message(msg: Any) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise Mismatch("choices[0].message is not an object")
    reasoning = msg.get("reasoning_content")
    refusal = msg.get("refusal")
    return completion.message(
        text_of(msg.get("content")),
        tool_calls=msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else None,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        refusal=refusal if isinstance(refusal, str) else None,
    )


class OpenAI(Dialect):
    name = "openai"
    health_check = "../models"

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        body = {k: v for k, v in request.items() if k not in _NOT_FORWARDED}
        if model:
            body["model"] = model
        body["stream"] = stream
        if stream and "stream_options" in request:
            body["stream_options"] = request["stream_options"]
        options: dict[str, Any] = {}  # `num_predict` goes in `options`, as Ollama reads it
        put_max_tokens(request, body, max_tokens_field, {"num_predict": options})
        if options:
            body["options"] = {**object_at(body, "options"), **options}
        return turns_last(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        default_shape = (ctx.shape.choices_path, ctx.shape.content_path) == (
            self.choices_path,
            self.content_path,
        )
        usage = _usage(raw.get("usage")) if isinstance(raw, dict) else None
        if default_shape and isinstance(raw, dict) and isinstance(raw.get("choices"), list):
            if not raw["choices"]:
                raise Mismatch("choices is empty")
            choices = []
            for i, c in enumerate(raw["choices"]):
                if not isinstance(c, dict):
                    raise Mismatch(f"choices[{i}] is not an object")
                usage = usage or _usage(c.get("usage"))  # Moonshot puts it in the choice
                choices.append(
                    completion.choice(
                        _message(c.get("message")),
                        completion.finish_reason(c.get("finish_reason")),
                        c.get("index", i) if isinstance(c.get("index", i), int) else i,
                    )
                )
        else:
            found, content = content_at(raw, ctx.shape)
            finish = found.get("finish_reason") if isinstance(found, dict) else None
            choices = [
                completion.choice(completion.message(content), completion.finish_reason(finish))
            ]
        extra = {}
        if isinstance(raw.get("system_fingerprint"), str):
            extra["system_fingerprint"] = raw["system_fingerprint"]
        return completion.completion(
            id=raw["id"] if isinstance(raw.get("id"), str) else None,
            model=model_of(raw, ctx),
            created=raw["created"] if isinstance(raw.get("created"), int) else ctx.created,
            choices=choices,
            usage=usage,
            extra=extra,
        )

    def plain(self, raw: Any, shape: Shape) -> bool | None:
        if shape != _SHAPE or not _plain_answer(raw):
            return None
        exact = True
        for choice in raw["choices"]:
            msg = choice["message"]
            if "logprobs" not in choice or "refusal" not in msg:
                exact = False
                choice.setdefault("logprobs", None)
                msg.setdefault("refusal", None)
        return exact

    def decoder(self, ctx: Context) -> Decoder:
        return OpenAIDecoder(ctx, self)


_SHAPE = Shape(OpenAI.choices_path, OpenAI.content_path)
_ANSWER = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint"})
_ANSWER_CHOICE = frozenset({"index", "message", "logprobs", "finish_reason"})
_MESSAGE = frozenset({"role", "content", "refusal", "reasoning_content"})
_USAGE = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})


# Fields of an OpenAI answer or chunk kept as they came when they are strings (its schema has
# them; an answer keeps only the first).
_KEPT = ("system_fingerprint", "service_tier", "obfuscation")


def _plain_around(obj: dict[str, Any], kind: str, fields: frozenset[str]) -> bool:
    """Whether what is around an answer's or a chunk's choices is plain: none but `fields`,
    `object` `kind`, a non-empty string id and model, an integer `created`, the kept fields
    strings, and a list of choices."""
    if not obj.keys() <= fields or obj.get("object") != kind:
        return False
    got, model = obj.get("id"), obj.get("model")
    if (
        type(got) is not str
        or not got
        or type(obj.get("created")) is not int
        or type(model) is not str
        or not model
        or type(obj.get("choices")) is not list
    ):
        return False
    return all(type(obj.get(key, "")) is str for key in _KEPT)


def _plain_answer(obj: Any) -> bool:
    """Whether an answer is its own normalization but for a missing `logprobs` of a choice or
    `refusal` of a message, with nothing in it to check: `completion.malformed` passes it.
    Its fields are an OpenAI answer's, of their types; each choice is the assistant's text
    (or null, and its reasoning), with a finish reason of OpenAI's; its usage the three counts.
    (Once per answer: written for speed; `plain` is the rest.)"""
    if type(obj) is not dict or not _plain_around(obj, "chat.completion", _ANSWER):
        return False
    choices = obj["choices"]
    if not choices:
        return False
    if "usage" in obj:
        usage = obj["usage"]
        if type(usage) is not dict or usage.keys() != _USAGE:
            return False
        for count in usage.values():
            if type(count) is not int or not -INT64_MAX - 1 <= count <= INT64_MAX:
                return False
    for i, choice in enumerate(choices):
        if type(choice) is not dict or not choice.keys() <= _ANSWER_CHOICE:
            return False
        msg, finish = choice.get("message"), choice.get("finish_reason")
        if choice.get("index") != i or type(choice["index"]) is not int:
            return False
        if choice.get("logprobs") is not None or type(finish) is not str:
            return False
        if finish not in completion.FINISH_REASONS or type(msg) is not dict:
            return False
        if not msg.keys() <= _MESSAGE or msg.get("role") != "assistant" or "content" not in msg:
            return False
        content, refusal = msg["content"], msg.get("refusal")
        reasoning = msg.get("reasoning_content", "x")
        if not (content is None or type(content) is str) or type(reasoning) is not str:
            return False
        if not reasoning or not (refusal is None or type(refusal) is str):
            return False
    return True


_PLAIN = frozenset({"id", "object", "created", "model", "choices", *_KEPT})
_PLAIN_CHOICE = frozenset({"index", "delta", "logprobs", "finish_reason"})
_PLAIN_DELTA = frozenset({"role", "content"})
_TEXT = frozenset({"content"})


def _plain(obj: dict[str, Any]) -> bool:
    """Whether a chunk is its own normalization with nothing in it to check: what `feed`
    makes of it is itself, and `completion.malformed` passes it. Its fields are an OpenAI
    chunk's, of their types; each choice is text, a role or a finish reason of OpenAI's.
    (Once per chunk of a stream: written for speed.)"""
    if not _plain_around(obj, "chat.completion.chunk", _PLAIN):
        return False
    for i, choice in enumerate(obj["choices"]):
        if type(choice) is not dict or choice.keys() != _PLAIN_CHOICE:
            return False
        delta, finish, index = choice["delta"], choice["finish_reason"], choice["index"]
        if index != i or type(index) is not int or choice["logprobs"] is not None:
            return False
        if finish is not None and finish not in completion.FINISH_REASONS:
            return False
        if type(delta) is not dict:
            return False
        if delta.keys() == _TEXT:
            if type(delta["content"]) is not str:
                return False
        elif (
            not delta.keys() <= _PLAIN_DELTA
            or delta.get("role", "assistant") != "assistant"
            or type(delta.get("content", "")) is not str
        ):
            return False
    return True


def _around_text(chunk: dict[str, Any], data: bytes) -> tuple[bytes, bytes] | None:
    """The bytes of plain chunk `chunk` (parsed from `data`) around the inside of its text
    string, when it has one choice and one `content` key; else None. A provider's next
    chunks are mostly these bytes with another text between them (OpenAI's and its peers'
    are), and such a chunk is plain too (`OpenAIDecoder.repeats`)."""
    choices = chunk["choices"]
    if len(choices) != 1 or choices[0]["delta"].keys() != _TEXT:
        return None
    key = data.find(b'"content":')
    if key < 0 or data.find(b'"content":', key + 1) >= 0:
        return None
    start = key + 10
    while data[start : start + 1] in (b" ", b"\t"):
        start += 1
    if data[start : start + 1] != b'"':
        return None
    end = start
    while True:  # the string's closing quote: one not escaped by a backslash
        end = data.find(b'"', end + 1)
        if end < 0:
            return None
        if (end - start - 1 - len(data[start + 1 : end].rstrip(b"\\"))) % 2 == 0:
            return data[: start + 1], data[end:]


class OpenAIDecoder(Decoder):
    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self._plain = ctx.shape.model_field == "model"  # else the model is read elsewhere
        # The first plain text chunk: `_around_text`'s parts of its bytes, and its own copy.
        self._first: tuple[bytes, bytes, dict[str, Any]] | None = None

    def repeats(
        self, frames: list[tuple[str | None, bytes]], at: int, out: list[dict[str, Any]]
    ) -> int:
        """The frames from `at` on that are the first plain text chunk with another text, as
        `Verbatim` chunks: each what `feed` makes of it, without its walk or a call per frame
        (the relay's hot loop; docs/decisions.md has what it saves)."""
        if self._first is None:
            return at
        head, tail, like = self._first
        choice = like["choices"][0]
        start, after = len(head), len(tail)
        for i in range(at, len(frames)):
            event, data = frames[i]
            end = len(data) - after
            # `head`, the inside of a string, `tail`: no quote in between (so the string ends
            # where the first one's did) nor a backslash before its end (escaping it). Then,
            # when that inside parses as a string's, this is the first chunk with that text.
            if (
                event is not None
                or end < start
                or not data.startswith(head)
                or not data.endswith(tail)
                or data.find(b'"', start) != end
                or data[end - 1] == 0x5C
            ):
                return i
            try:  # the text alone, between the quotes that end `head` and begin `tail`
                text = orjson.loads(data[start - 1 : end + 1])
            except orjson.JSONDecodeError:
                return i  # `feed` tells why
            made = choice.copy()
            made["delta"] = {"content": text}
            chunk = Verbatim(like)
            chunk["choices"] = [made]
            chunk.raw = data
            out.append(chunk)
        return len(frames)

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        if data == b"[DONE]":
            self.finished = True
            return []
        obj = loads(data)
        if (
            event is None
            and self._plain
            and type(obj) is dict
            and _plain(obj)  # so no `error` in it either
            and b"\n" not in data
            and b"\r" not in data
        ):
            for choice in obj["choices"]:
                if choice["finish_reason"] is not None:
                    self.finished = True
            if self._first is None and not self.finished:
                around = _around_text(obj, data)
                if around is not None:
                    self._first = (*around, {**obj, "choices": [dict(obj["choices"][0])]})
            return [Verbatim.of(obj, data)]  # its bytes go on as they came (one line of SSE)
        obj = self.judged(event, obj)
        raw_choices = obj.get("choices")
        usage = _usage(obj.get("usage"))
        choices = []
        for i, c in enumerate(raw_choices if isinstance(raw_choices, list) else []):
            if not isinstance(c, dict):
                raise Mismatch("stream choice is not an object")
            usage = usage or _usage(c.get("usage"))
            delta = c.get("delta")
            finish = completion.finish_reason(c.get("finish_reason"), None)
            if finish is not None:
                self.finished = True
            choices.append(
                {
                    "index": c["index"] if isinstance(c.get("index"), int) else i,
                    "delta": delta if isinstance(delta, dict) else {},
                    "logprobs": c.get("logprobs") if isinstance(c.get("logprobs"), dict) else None,
                    "finish_reason": finish,
                }
            )
        out = {
            "id": obj["id"] if isinstance(obj.get("id"), str) and obj["id"] else self.id,
            "object": "chat.completion.chunk",
            "created": obj["created"] if isinstance(obj.get("created"), int) else self.ctx.created,
            "model": model_of(obj, self.ctx),
            "choices": choices,
        }
        for key in _KEPT:
            if isinstance(obj.get(key), str):
                out[key] = obj[key]
        if usage is not None:
            out["usage"] = usage
        return [out]


DIALECT = OpenAI()
