"""Google Gemini's `generateContent` API (Generative Language, `v1beta`).

The model and the stream flag are in the URL: `…/models/{model}:generateContent`, and for a
stream `…/models/{model}:streamGenerateContent?alt=sse`. The endpoint in the config may be:

- the models collection, `https://generativelanguage.googleapis.com/v1beta/models` (the usual
  form): the model of each request is appended;
- a template with `{model}`, e.g. `…/v1beta/models/{model}:generateContent`;
- a full URL for one model, `…/v1beta/models/gemini-2.0-flash:generateContent`.

In each case the method becomes `streamGenerateContent` plus `alt=sse` for stream requests.
The key goes in the header `x-goog-api-key` (the default `auth_header` of this format) or in the
query (`auth_query: key`).

The body takes the system prompt as `systemInstruction`, the turns as `contents` with `parts`
and the roles `user` and `model` (turns of one role in a row are joined; a tool result is a
`functionResponse` part of a user turn, an assistant tool call a `functionCall` part; images
are `inlineData` for `data:` URLs, else `fileData`), and the settings in `generationConfig`
(`temperature`, `topP`, `maxOutputTokens`, `stopSequences`, `candidateCount`, …). OpenAI
tools become `functionDeclarations`, `tool_choice` a `functionCallingConfig`.

The answer is `candidates[].content.parts[]`: text parts make the content (parts marked
`thought` the `reasoning_content`), `functionCall` parts OpenAI tool calls. `finishReason`
STOP → stop, MAX_TOKENS → length, SAFETY/RECITATION/… → content_filter. Usage comes from
`usageMetadata` (thought tokens count as completion tokens and as reasoning tokens); the model
from `modelVersion`. A prompt that Gemini blocks comes back without candidates and with
`promptFeedback.blockReason`: that is `content_blocked`, naming the block reason (as an answer
whose content was filtered away, `finishReason: SAFETY` with no text, is).

The stream (`alt=sse`) is `data: {GenerateContentResponse}` events with no terminal marker: the
event whose candidate has a `finishReason` ends it. Errors are
`{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message", "details": [{"reason"}]}}`;
a bad key is HTTP 400 with reason `API_KEY_INVALID` (→ 401, `auth_failed`), quota is
`RESOURCE_EXHAUSTED` (→ 429).

One module per message kind, each translation beside its inverse: `request` (`encode_request`,
and `decode_request` for a client that speaks the Gemini API to the proxy, protocol §10.2),
`schema` (what a request may hold), `answer` (`decode_answer`, `encode_answer`), `stream`
(`GeminiDecoder`, `StreamEncoder`), `errors` (`error_of`, and the proxy's own `error_body`).
This module is the provider format (`Gemini`): the URL, the key, the native body."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from ...core.outcomes import ErrorInfo
from ..base import Context, Decoder, Dialect
from ..convert import with_model
from .answer import decode_answer
from .errors import error_of
from .request import MAX_TOKENS_FIELD, encode_request
from .stream import GeminiDecoder

_METHOD = re.compile(r":(?:streamGenerateContent|generateContent)$")


class Gemini(Dialect):
    """Gemini's generateContent format."""

    name = "gemini"
    speaks = "gemini"
    auth_header = "x-goog-api-key"
    choices_path = "candidates"
    content_path = "content.parts.0.text"
    max_tokens_field = MAX_TOKENS_FIELD

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        base, _, query = endpoint.partition("?")
        model = self.path_model(model)
        if "{model}" in base:
            base = with_model(base, model)
        elif not _METHOD.search(base):
            base = f"{base.rstrip('/')}/{quote(model, safe='')}:generateContent"
        base = _METHOD.sub(":streamGenerateContent" if stream else ":generateContent", base)
        params = [query] if query else []
        if stream and not re.search(r"(^|&)alt=", query):
            params.append("alt=sse")
        return base + ("?" + "&".join(params) if params else "")

    def needs_model(self, endpoint: str) -> bool:
        return self.model_in_url(endpoint)

    def model_in_url(self, endpoint: str) -> bool:
        base = endpoint.partition("?")[0]
        return "{model}" in base or not _METHOD.search(base)

    def path_model(self, model: str) -> str:
        return model.removeprefix("models/")  # as the API names its models

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        return encode_request(request, max_tokens_field)

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        """A Gemini API request as it came: the model and the stream are in the URL."""
        return {k: v for k, v in request.items() if k != "agent_reach"}

    def error_of(self, body: Any) -> ErrorInfo | None:
        return error_of(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        return decode_answer(raw, ctx, (self.choices_path, self.content_path))

    def decoder(self, ctx: Context) -> Decoder:
        return GeminiDecoder(ctx, self)


DIALECT = Gemini()
