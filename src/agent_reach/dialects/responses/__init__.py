"""OpenAI's Responses API (`POST /v1/responses`), both ways: the wire format of Codex CLI.

One module per message kind, each translation beside its inverse: `request` (a chat request
as a Responses request for a `format: responses` provider, `encode_request`; a client's
Responses request read as a chat request, `decode_request`), `answer` (`decode_answer`,
`encode_answer`), `stream` (`ResponsesDecoder`, `StreamEncoder`), and `tools` (a request's
tools as chat functions). This module is the provider format (`Responses`); a request that
arrived in the Responses API itself goes as it came (`native_body`).

Every object built here validates against the official schemas (`Response`,
`ResponseStreamEvent`), which ask for more than the SDK: `output_text` parts carry
`logprobs`, usage carries `input_tokens_details.cache_write_tokens`."""

from __future__ import annotations

from typing import Any

from ...core.outcomes import ErrorInfo
from ..artifacts import homed
from ..base import Context, Decoder, Dialect, openai_error
from ..convert import object_at
from .answer import decode_answer, error_code
from .request import encode_request
from .stream import ResponsesDecoder


class Responses(Dialect):
    """The Responses API as a provider format."""

    name = "responses"
    speaks = "responses"
    health_check = "models"  # `…/v1/responses` → `…/v1/models`
    choices_path = "output"
    content_path = "content.0.text"
    max_tokens_field = "max_output_tokens"

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        return encode_request(request, model, stream, max_tokens_field)

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        body = super().native_body(request, model, stream)
        body.pop("previous_response_id", None)  # the proxy's own ids, already expanded
        return body

    def home(self, body: dict[str, Any], origin: str | None) -> dict[str, Any]:
        """The `reasoning` input items, sorted by their `encrypted_content`."""
        items = body.get("input")
        if not isinstance(items, list):
            return body
        return {**body, "input": homed(items, origin)}

    def error_of(self, body: Any) -> ErrorInfo | None:
        if isinstance(body, dict) and body.get("status") == "failed":
            err = object_at(body, "error")
            return ErrorInfo(
                str(err.get("message") or "response failed"), error_code(err.get("code"))
            )
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        return decode_answer(raw, ctx, (self.choices_path, self.content_path))

    def decoder(self, ctx: Context) -> Decoder:
        return ResponsesDecoder(ctx, self)


DIALECT = Responses()
