"""The proxy's API faces, one module each, each a row (`face.Face`): Chat Completions, Responses
(and its WebSocket), Messages, Gemini, Embeddings and step mode. `FACES` is the one list the
route table and the error shapes come from; `relay` is what they share (the body, the headers,
the one relay of answers)."""

from __future__ import annotations

from . import chat, embeddings, gemini, messages, responses_socket, step
from .face import Face

FACES: tuple[Face, ...] = (
    chat.FACE,
    responses_socket.FACE,  # `responses.FACE` and its WebSocket
    messages.FACE,
    gemini.FACE,
    embeddings.FACE,
    step.FACE,
)
# The shape of every other path's errors: OpenAI's (the status page, `/v1/models`, a 404).
DEFAULT = Face("openai", ())


def face_of(path: str) -> Face:
    """The face whose errors `path` takes: the one that owns it, else OpenAI's shape."""
    for face in FACES:
        if face.owns(path):
            return face
    return DEFAULT
