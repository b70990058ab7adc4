"""A refused output cap (protocol §4): the maximum a provider's refusal states, read only from the
provider's own wording for the cap field it was sent (`stated_cap`). Pure."""

from __future__ import annotations

import functools
import re

from .outcomes import Outcome
from .trace import Reason

# A refused output cap (docs/providers.md lists the wordings, protocol §4): the whole message
# must be one provider's known wording, naming the cap field the provider was sent (`{f}`) and,
# where the wording repeats it, the value sent (`sent`). A sentence found anywhere in the text
# is not enough: providers echo unknown parameter names in their 400s (OpenAI's "Unrecognized
# request argument supplied: X", Anthropic's "X: Extra inputs are not permitted"), so a client
# could make any refusal say any maximum (issue 40).
_CAP_WORDINGS = (
    # DeepSeek: "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]"
    r"invalid {f} value, the valid range of {f} is \[[01], (?P<max>\d+)\]",
    # DashScope: "<400> InternalError.Algo.InvalidParameter: Range of max_tokens should be [1, N]"
    r"(?:<400> )?(?:[\w.]+: )?range of {f} should be \[[01], (?P<max>\d+)\]",
    # OpenAI: "max_tokens is too large: 6000. This model supports at most 4096 completion
    # tokens, whereas you provided 6000."
    r"{f} is too large: (?P<sent>\d+)\. this model supports at most (?P<max>\d+) completion"
    r" tokens, whereas you provided (?P=sent)",
    # Volcengine Ark: "The parameter max_tokens specified in the request is not valid: integer
    # above maximum value, expected a value <= 32768, but got 64000 instead."
    r"the parameter {f} specified in the request is not valid: integer above maximum value,"
    r" expected a value <= (?P<max>\d+), but got (?P<sent>\d+) instead",
    # Groq: "`max_tokens` must be less than or equal to `16384`, the maximum value for
    # `max_tokens` is less than the `context_window` for this model"
    r"{f} must be less than or equal to `?(?P<max>\d+)`?(?:, the maximum value for {f} is less"
    r" than the `?context_window`? for this model)?",
    # Anthropic: "max_tokens: 16000 > 8192, which is the maximum allowed number of output tokens
    # for claude-3-5-sonnet-20241022"
    r"{f}: (?P<sent>\d+) > (?P<max>\d+), which is the maximum allowed number of output tokens"
    r" for [\w.@/-]+",
)
CAP_FLOOR = 256  # a stated maximum below it is not believed: no model's output cap is that low


@functools.lru_cache(maxsize=64)
def _cap_wordings(fields: frozenset[str]) -> tuple[re.Pattern[str], ...]:
    names = "|".join(re.escape(f.lower()) for f in sorted(fields))
    field = f"`?(?:{names})`?"
    return tuple(re.compile(w.replace("{f}", field) + r"\.?") for w in _CAP_WORDINGS)


def stated_cap(outcome: Outcome, fields: frozenset[str], sent: int | None) -> int | None:
    """The most output tokens a provider's refusal of the output cap it was sent (`sent`, in
    one of `fields`) says it allows: a `bad_request` whose whole message is a known wording for
    one of those fields, stating a maximum below `sent` and at least `CAP_FLOOR` (and, where
    the wording repeats the value sent, repeating `sent`); None for anything else."""
    if outcome.reason is not Reason.BAD_REQUEST or sent is None or not fields:
        return None
    text = outcome.detail.strip().lower()
    for wording in _cap_wordings(fields):
        found = wording.fullmatch(text)
        if found is None:
            continue
        stated = int(found["max"])
        echoed = found.groupdict().get("sent")
        if (echoed is None or int(echoed) == sent) and CAP_FLOOR <= stated < sent:
            return stated
        return None
    return None
