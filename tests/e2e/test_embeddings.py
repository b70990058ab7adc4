"""Embeddings through `agent-reach serve` (protocol §10.3) with the official clients: `openai`'s
`embeddings.create` (its default, base64, and float) and `google-genai`'s `embed_content` on
the Gemini face, against the fakes of tests/fakes/embeddings.py: a dead provider, a bad key, one
that answers a width too wide, one of another space with a higher weight (never asked), and a
DashScope-like one that refuses more than 10 inputs, behind `max_batch: 10`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from google import genai
from google.genai import types

from ..fakes.embeddings import EmbeddingServer, vector
from ..fakes.upstream import Upstream, proxy_config, refused_url
from .test_cli import run as cli
from .test_proxy import Proxy, start, stop

KEY = "sk-embed-client-1a2b3c"
WIDTH = 64
TRACE = ["dead:connect_failed", "badkey:auth_failed", "wide:schema_mismatch", "dash:ok"]


def provider(name: str, url: str, space: str, model: str, **more: Any) -> dict[str, Any]:
    weight = more.pop("fallback_weight", 1.0)
    return {
        "name": name,
        "endpoint": url,
        "api_key_env": "",
        "fallback_weight": weight,
        "embeddings": {"models": {space: model}, **more},
    }


@pytest.fixture(scope="module")
def proxy(
    upstream: Upstream, embedding_fakes: EmbeddingServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    providers = [
        provider(
            "other",
            embedding_fakes.url("ok", "qwen-proxied"),
            "qwen",
            "text-embedding-v4",
            fallback_weight=9,
        ),
        provider("dead", refused_url(), "bge-m3", "bge-m3", fallback_weight=8),
        provider(
            "badkey",
            embedding_fakes.url("auth", "bge-m3"),
            "bge-m3",
            "BAAI/bge-m3",
            fallback_weight=7,
        ),
        provider(
            "wide",
            embedding_fakes.url("wide", "bge-m3"),
            "bge-m3",
            "BAAI/bge-m3",
            fallback_weight=6,
        ),
        provider(
            "dash",
            embedding_fakes.url("dash", "bge-m3"),
            "bge-m3",
            "bge-m3",
            max_batch=10,
            token_input=True,
        ),
        {"name": "down", "endpoint": refused_url(), "embeddings": {"models": {"lonely": "m"}}},
    ]
    spaces = {
        "bge-m3": {"dimensions": WIDTH, "aliases": ["BAAI/bge-m3"]},
        "qwen": {"dimensions": WIDTH},
        "lonely": {"dimensions": WIDTH},
    }
    config = proxy_config(
        providers,
        embeddings={"spaces": spaces},
        server={"api_keys_env": "PROXY_KEYS", "max_body_bytes": 2**24},
    )
    p = start(config, tmp_path_factory.mktemp("embeddings"), upstream, env={"PROXY_KEYS": KEY})
    yield p
    assert stop(p) == 0
    log = (Path(p.proc.args[2]).parent / "proxy.log").read_text()  # type: ignore[index]
    assert "Traceback" not in log
    assert KEY not in log


def texts(n: int) -> list[str]:
    return [f"chunk {i} of the repository: class C{i}: pass" for i in range(n)]


@pytest.mark.parametrize("n", [1, 25, 2000])
@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_the_openai_sdk_gets_the_spaces_vectors_in_order(
    proxy: Proxy, embedding_fakes: EmbeddingServer, n: int, encoding: str
) -> None:
    client = proxy.client(KEY)
    asked = {} if encoding == "base64" else {"encoding_format": "float"}  # the SDK's default
    raw = client.embeddings.with_raw_response.create(model="BAAI/bge-m3", input=texts(n), **asked)
    answer = raw.parse()
    assert raw.headers["x-agent-reach-embedding-space"] == "bge-m3"
    assert raw.headers["x-agent-reach-provider"] == "dash"
    trace = raw.headers["x-agent-reach-trace"].split(",")
    assert [t.rsplit(":", 1)[0] for t in trace] == TRACE  # provider:reason:ms
    assert answer.model == "bge-m3"
    assert [d.index for d in answer.data] == list(range(n))
    assert [d.embedding for d in answer.data] == [vector("bge-m3", t, WIDTH) for t in texts(n)]
    assert answer.usage.total_tokens == sum(len(t.split()) for t in texts(n))
    assert embedding_fakes.calls("ok", "qwen-proxied") == []  # the other space's: never asked


def test_every_provider_of_the_space_down_is_the_all_failed_error(proxy: Proxy) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        proxy.client(KEY).embeddings.create(model="lonely", input="hello")
    assert info.value.status_code == 502
    body: Any = info.value.body
    assert [a["provider"] for a in body["attempts"]] == ["down"]


def test_a_wrong_width_or_an_unknown_space_is_a_400_naming_its_field(proxy: Proxy) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        proxy.client(KEY).embeddings.create(model="bge-m3", input="x", dimensions=1024)
    assert info.value.param == "dimensions"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as missing:
        proxy.client(KEY).embeddings.create(model="text-embedding-3-large", input="x")
    assert "bge-m3" in str(missing.value)


def test_thirty_thousand_inputs_are_a_400_naming_the_cap(
    proxy: Proxy, embedding_fakes: EmbeddingServer
) -> None:
    """Issue 47, High 2: a 150 KB body of one-character inputs asks no provider for anything."""
    before = len(embedding_fakes.seen)
    with pytest.raises(openai.BadRequestError) as info:
        proxy.client(KEY).embeddings.create(model="bge-m3", input=["x"] * 30_000)
    assert info.value.param == "input"  # type: ignore[attr-defined]
    assert "embeddings.max_inputs" in str(info.value)
    assert len(embedding_fakes.seen) == before
    assert proxy.get("/healthz")[0] == 200


def test_google_genai_embeds_on_the_gemini_face(
    proxy: Proxy, embedding_fakes: EmbeddingServer
) -> None:
    options = types.HttpOptions(base_url=proxy.base)
    client = genai.Client(api_key=KEY, http_options=options)
    for n in (1, 25):
        answer = client.models.embed_content(model="bge-m3", contents=texts(n))
        got = [e.values for e in answer.embeddings or []]
        assert got == [vector("bge-m3", t, WIDTH) for t in texts(n)]
    assert embedding_fakes.calls("ok", "qwen-proxied") == []


@pytest.mark.parametrize("width", [{}, [], {"a": 1}, [64], "64", True, 0])
@pytest.mark.parametrize("method", ["embedContent", "batchEmbedContents"])
def test_a_malformed_output_dimensionality_is_a_400(proxy: Proxy, width: Any, method: str) -> None:
    """Issue 47: not a 500."""
    ask = {"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": width}
    body = {"requests": [ask]} if method == "batchEmbedContents" else ask
    path = f"/v1beta/models/bge-m3:{method}"
    status, answer = proxy.post(path, body, {"x-goog-api-key": KEY})
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert "outputDimensionality" in answer["error"]["message"]


def test_langchain_and_llamaindex_embed_through_the_proxy(proxy: Proxy) -> None:
    from langchain_openai import OpenAIEmbeddings
    from llama_index.embeddings.openai import OpenAIEmbedding

    chain = OpenAIEmbeddings(
        model="bge-m3",
        base_url=f"{proxy.base}/v1",
        api_key=KEY,  # type: ignore[arg-type]
        check_embedding_ctx_length=False,  # as its docs say for other backends than OpenAI
    )
    llama = OpenAIEmbedding(model_name="bge-m3", api_base=f"{proxy.base}/v1", api_key=KEY)
    for n in (1, 25, 2000):
        want = [vector("bge-m3", t, WIDTH) for t in texts(n)]
        assert chain.embed_documents(texts(n)) == want
        assert llama.get_text_embedding_batch(texts(n)) == want
    assert chain.embed_query("one text") == vector("bge-m3", "one text", WIDTH)


def test_step_mode_tries_one_provider_of_the_space(proxy: Proxy) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    ask = {"model": "bge-m3", "input": texts(12), "encoding_format": "float"}
    status, body = proxy.post("/agent-reach/v1/route", {**ask, "provider": "dash"}, auth)
    assert status == 200
    assert body["agent_reach"]["status"] == "ok"
    assert [d["embedding"] for d in body["data"]] == [vector("bge-m3", t, WIDTH) for t in texts(12)]
    status, body = proxy.post("/agent-reach/v1/route", ask, auth)  # the space's first: dead
    assert (status, body["provider"], body["reason"]) == (200, "dead", "connect_failed")
    assert body["next_route"] == "badkey"  # the space's next, not the other space's provider
    status, body = proxy.post("/agent-reach/v1/route", {**ask, "provider": "other"}, auth)
    assert status == 400
    assert body["error"]["param"] == "provider"


def test_metrics_count_each_spaces_requests_and_status_shows_its_providers(proxy: Proxy) -> None:
    client = proxy.client(KEY)
    client.embeddings.create(model="bge-m3", input=texts(3))
    with pytest.raises(openai.APIStatusError):
        client.embeddings.create(model="lonely", input="x")
    status, text = proxy.get("/metrics", {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    metrics = {
        m: float(v) for m, v in re.findall(r"^(agent_reach_embedding\S+) (\S+)$", text, re.M)
    }
    assert metrics['agent_reach_embedding_requests_total{outcome="failed",space="lonely"}'] >= 1
    assert metrics['agent_reach_embedding_requests_total{outcome="ok",space="bge-m3"}'] >= 1
    assert metrics['agent_reach_embedding_vectors_total{provider="dash",space="bge-m3"}'] >= 3
    assert not [m for m in metrics if 'provider="other"' in m]  # the other space: never asked
    status, view = proxy.get("/agent-reach/v1/status", {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    served = {row["provider"]: row["embeddings"] for row in view["providers"]}
    assert served["dash"] == {"bge-m3": "bge-m3"}
    assert served["other"] == {"qwen": "text-embedding-v4"}


def test_the_cli_embeds_lines_of_stdin(proxy: Proxy) -> None:
    config = Path(proxy.proc.args[2])  # type: ignore[index]
    done = cli("embed", "-m", "BAAI/bge-m3", config=config, stdin="\n".join(texts(25)) + "\n\n")
    assert done.returncode == 0, done.stderr
    vectors = [json.loads(line) for line in done.stdout.splitlines()]
    assert vectors == [vector("bge-m3", t, WIDTH) for t in texts(25)]
    done = cli("embed", "--json", "-m", "bge-m3", "one", "two", config=config)
    answer = json.loads(done.stdout)
    assert answer["provider"] == "dash"
    assert [a["provider"] for a in answer["trace"]] == [t.split(":")[0] for t in TRACE]
    assert [d["index"] for d in answer["response"]["data"]] == [0, 1]
    down = cli("embed", "-m", "lonely", "x", config=config)
    assert down.returncode == 1
    assert "down" in down.stderr
    assert "connect_failed" in down.stderr
    unnamed = cli("embed", "x", config=config)  # three spaces: which one?
    assert unnamed.returncode == 2
    assert "--model" in unnamed.stderr
    assert "Traceback" not in unnamed.stderr


def test_token_ids_go_only_to_providers_that_take_them(proxy: Proxy) -> None:
    ids = [[9906, 1917], [15339], [40, 1093, 499, 3938]] * 5  # 15 inputs: two batches of dash's
    raw = proxy.client(KEY).embeddings.with_raw_response.create(model="bge-m3", input=ids)
    answer = raw.parse()
    assert raw.headers["x-agent-reach-trace"].split(":")[:2] == ["dash", "ok"]  # one attempt
    assert [d.embedding for d in answer.data] == [vector("bge-m3", str(t), WIDTH) for t in ids]
    assert answer.usage.total_tokens == sum(len(t) for t in ids)
    with pytest.raises(openai.BadRequestError) as refused:  # no provider of lonely takes ids
        proxy.client(KEY).embeddings.create(model="lonely", input=[[1, 2]])
    assert refused.value.param == "input"  # type: ignore[attr-defined]
    assert "send the text" in str(refused.value)
    with pytest.raises(openai.BadRequestError) as mixed:
        proxy.client(KEY).embeddings.create(model="bge-m3", input=[[1, 2], "text"])  # type: ignore[list-item]
    assert "input[1]" in str(mixed.value)


def test_v1_models_lists_the_embedding_spaces_by_their_names(proxy: Proxy) -> None:
    """`GET /v1/models` lists each space by its names, which `POST /v1/embeddings` takes (a
    first day's stumble: it listed chat models only); the SDK's `models.list()` reads them."""
    listed = [m.id for m in proxy.client(KEY).models.list()]
    for name in ("bge-m3", "BAAI/bge-m3", "qwen", "lonely"):
        assert name in listed
    assert len(listed) == len(set(listed))
