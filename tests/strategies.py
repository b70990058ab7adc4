"""What the dialects' round-trip property tests draw from (hypothesis strategies), and a chat
answer cut into a stream."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agent_reach.chat import completion

TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12
)
NAME = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
CALL_ID = st.from_regex(r"(call|toolu)_[A-Za-z0-9]{1,8}", fullmatch=True)
ARGS = st.dictionaries(
    st.from_regex(r"[a-z]{1,6}", fullmatch=True),
    st.one_of(st.integers(-999, 999), TEXT, st.booleans(), st.none()),
    max_size=3,
)
IMAGE = st.sampled_from(["data:image/png;base64,iVBORw0KGgo=", "https://example.com/cat.jpg"]).map(
    lambda url: {"type": "image_url", "image_url": {"url": url}}
)


def chat_stream(answer: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """The answer as a chat stream, its text and arguments cut in pieces of `size`."""
    message = answer["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return completion.chunk(
            id="c", model="deepseek-chat", created=1, delta=delta, finish=finish
        )

    out = [chunk({"role": "assistant"})]
    for key in ("reasoning_content", "content"):
        text = message.get(key) or ""
        out += [chunk({key: text[i : i + size]}) for i in range(0, len(text), size)]
    for n, call in enumerate(message.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        head = {"index": n, "id": call["id"], "type": "function"}
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {**head, "function": {"name": call["function"]["name"], "arguments": ""}}
                    ]
                }
            )
        )
        out += [
            chunk({"tool_calls": [{"index": n, "function": {"arguments": args[i : i + size]}}]})
            for i in range(0, len(args), size)
        ]
    out.append(chunk({}, answer["choices"][0]["finish_reason"]))
    out.append(completion.chunk(id="c", model="deepseek-chat", created=1, usage=answer["usage"]))
    return out
