"""Hooks: loaded with the config, run on answers, failing over on `hook_error`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent_reach import ConfigError, Reason, Router
from agent_reach.config import load_config

from .conftest import COMPLETION, assert_valid
from .fakes.serving import serving
from .fakes.upstream import Upstream

EXAMPLES = Path(__file__).parent.parent / "examples"
HELLO = {"model": "antique-v1", "messages": [{"role": "user", "content": "这是什么？"}]}


@pytest.fixture
async def antique_api() -> AsyncIterator[str]:
    """A loopback antique-identification API answering {"item", "era", "confidence"}."""

    async def identify(_: web.Request) -> web.Response:
        return web.json_response({"item": "青花瓷瓶", "era": "明永乐", "confidence": 0.92})

    app = web.Application()
    app.router.add_post("/identify", identify)
    async with serving(app) as port:
        yield f"http://127.0.0.1:{port}/identify"


async def test_antique_example_through_a_loopback_api(
    antique_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTIQUE_API_URL", antique_api)
    config = load_config(EXAMPLES / "antique.yaml")
    async with Router(config) as router:
        result = await router.achat(HELLO)
        chunks = [c async for c in router.astream(HELLO)]
    content = result.response["choices"][0]["message"]["content"]
    assert content == "鉴定结果：青花瓷瓶，年代：明永乐，置信度：92.0%"
    assert result.response["model"] == "antique-v1"
    assert_valid(COMPLETION, result.response)
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == content


HOOKS = """
def shout(raw):
    raw["choices"][0]["message"]["content"] = raw["choices"][0]["message"]["content"].upper()
    return raw

def broken(raw):
    raise ValueError("cannot read this")

def wrong(raw):
    return "a string"
"""


def config(tmp_path: Path, up: Upstream, **hooks: str) -> dict[str, Any]:
    (tmp_path / "myhooks.py").write_text(HOOKS)
    return {
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [
            {"name": "hooked", "endpoint": up.url("ok"), **hooks},
            {"name": "backup", "endpoint": up.url("backup")},
        ],
    }


async def test_preprocess_hook_changes_the_raw_answer(tmp_path: Path, up: Upstream) -> None:
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump(config(tmp_path, up, preprocess_hook="myhooks.py:shout")))
    async with Router.from_config(path) as router:
        result = await router.achat(HELLO)
    assert result.response["choices"][0]["message"]["content"] == "HELLO FROM OK"


@pytest.mark.parametrize(
    ("hook", "detail"), [("broken", "raised ValueError"), ("wrong", "returned str")]
)
async def test_failing_hook_is_hook_error_and_fails_over(
    tmp_path: Path, up: Upstream, hook: str, detail: str
) -> None:
    cfg = config(tmp_path, up, post_process_hook=f"{tmp_path}/myhooks.py:{hook}")
    async with Router(cfg) as router:
        result = await router.achat(HELLO)
    first, second = result.trace
    assert (first.reason, second.provider) == (Reason.HOOK_ERROR, "backup")
    assert detail in first.detail


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("missing.py:f", "no file"),
        ("myhooks.py:absent", "has no function 'absent'"),
        ("json:absent", "has no function 'absent'"),
    ],
)
def test_unloadable_hook_is_a_config_error_naming_the_provider(
    tmp_path: Path, up: Upstream, ref: str, message: str
) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, up, post_process_hook=ref)))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "provider 'hooked' (providers[0]), field 'post_process_hook'" in text
    assert message in text
