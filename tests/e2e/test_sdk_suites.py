"""openai-python's and anthropic-sdk-python's own request tests, run through the proxy.

Their generated tests of chat completions (`tests/api_resources/chat/test_completions.py`),
Responses (`tests/api_resources/test_responses.py`) and Messages
(`tests/api_resources/test_messages.py`) call `create(...)` with the fewest and with all
parameters, streamed and not, through `with_raw_response` and `with_streaming_response`, in the
sync, async and aiohttp clients, and check each answer against the SDK's types, loosely and
strictly (`_strict_response_validation`). Upstream they run against a mock of the OpenAPI spec
at `TEST_API_BASE_URL`; here that is the proxy (`agent-reach serve`), whose provider is the
loopback chat fake of `tests/fakes/upstream.py`. Each file runs as a pytest subprocess, unchanged,
with its repository's own conftest and settings, in the venv `scripts/ensure-sdk-suites.sh`
makes from the published sdists (pinned versions and hashes; docs/decisions.md says why).

Left out by selection, because agent-reach does not offer these at all: stored chat completions
(`chat.completions.retrieve` / `update` / `list` / `delete`), Responses' `compact`, and
background responses (`cancel`, and `retrieve(stream=True)`, which resumes one's events: the
proxy answers `background` at once, and refuses that `stream`). Everything else runs and must
pass.

The Responses tests name stored responses by fixed ids (`resp_677efb…`, and the placeholder
`previous_response_id` for a continuation), which a stateless mock takes as existing. `Stored`,
an HTTP front between that suite and the proxy, swaps each for a response the proxy stored just
before (one per request: the suite deletes the same id many times).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ..fakes.serving import Threaded
from ..fakes.upstream import Upstream
from .test_proxy import Proxy, base_config, start, stop

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "tests" / ".sdk-suites"


@dataclass(frozen=True)
class Suite:
    sdk: str  # the sdist's name without its version
    file: str
    base: str  # where under the proxy the SDK's base URL points
    leave_out: str  # a `-k` expression: the tests of endpoints agent-reach does not offer
    at_least: int  # tests that must run (and pass)
    stored_ids: bool = False  # it names stored responses by placeholders (`Stored`)


SUITE_FILES = [
    Suite(
        "openai",
        "tests/api_resources/chat/test_completions.py",
        "/v1",
        "not (retrieve or update or list or delete)",
        40,
    ),
    Suite(
        "openai",
        "tests/api_resources/test_responses.py",
        "/v1",
        # background responses: cancelling one, resuming its stream (`retrieve(stream=True)`)
        "not (cancel or compact or retrieve_overload_2 or retrieve_with_all_params_overload_2)",
        85,
        stored_ids=True,
    ),
    Suite("anthropic", "tests/api_resources/test_messages.py", "", "", 65),
]
PLACEHOLDER_ID = "resp_677efb5139a88190b512bc3fef8e535d"
PLACEHOLDER_PREVIOUS = "previous_response_id"  # the "all params" tests' value for it
ACCESS = re.compile(r"\dZ [A-Z]+ /\S* (\d{3}) ")  # the access lines of server/log.py
HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


class Stored:
    """An HTTP front for the proxy that relays every request unchanged, except that the
    suite's placeholder ids become ids of responses the proxy stored just before."""

    def __init__(self, proxy: str) -> None:
        self.proxy = proxy
        self.port = 0
        self.swapped = 0
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # the proxy's answers pass through as they were sent (compressed if they were)
        self._session = aiohttp.ClientSession(auto_decompress=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _fresh(self) -> str:
        assert self._session is not None
        body = {"model": "m", "input": "a response to retrieve, continue or delete"}
        async with self._session.post(self.proxy + "/v1/responses", json=body) as made:
            assert made.status == 200, await made.text()
            self.swapped += 1
            return str((await made.json())["id"])

    async def relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        path, body = request.path_qs, await request.read()
        if PLACEHOLDER_ID in path:
            path = path.replace(PLACEHOLDER_ID, await self._fresh())
        elif request.method == "POST" and body:
            sent = json.loads(body)
            if sent.get("previous_response_id") == PLACEHOLDER_PREVIOUS:
                body = json.dumps({**sent, "previous_response_id": await self._fresh()}).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with self._session.request(
            request.method, self.proxy + path, data=body, headers=headers
        ) as answer:
            out = web.StreamResponse(status=answer.status)
            out.headers.update({k: v for k, v in answer.headers.items() if k.lower() not in HOP})
            await out.prepare(request)
            async for piece in answer.content.iter_any():
                await out.write(piece)
            await out.write_eof()
            return out


@pytest.fixture(scope="module")
def served(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("sdk-suites")
    p = start(base_config(upstream), tmp, upstream)
    yield Served(p, tmp / "proxy.log")
    assert stop(p) == 0


@dataclass(frozen=True)
class Served:
    proxy: Proxy
    log: Path

    def statuses(self) -> list[int]:
        """The status of each request the proxy has answered, from its access lines."""
        return [int(m[1]) for m in ACCESS.finditer(self.log.read_text())]


@contextmanager
def in_front(proxy: Proxy) -> Iterator[Stored]:
    """A `Stored` for `proxy` on a free port of 127.0.0.1, in its own thread."""
    front, server = Stored(proxy.base), Threaded()
    app = web.Application(client_max_size=2**24)
    app.router.add_route("*", "/{tail:.*}", front.relay)
    server.run(front.open())
    front.port = server.serve(app)
    try:
        yield front
    finally:
        server.run(front.close())
        server.stop()


def counts(summary: str) -> dict[str, int]:
    """pytest's last line (`80 passed, 20 deselected in 3.1s`) as {outcome: number}."""
    found = re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)", summary)
    return {name: int(n) for n, name in found}


@pytest.mark.parametrize("suite", SUITE_FILES, ids=[s.file.rsplit("/", 1)[1] for s in SUITE_FILES])
def test_the_sdks_own_request_tests_pass_through_the_proxy(
    suite: Suite, served: Served, tmp_path: Path
) -> None:
    proxy = served.proxy
    subprocess.run([str(ROOT / "scripts" / "ensure-sdk-suites.sh")], check=True)
    (checkout,) = SUITES.glob(f"{suite.sdk}-*/")
    python = str(SUITES / "venv" / "bin" / "python")
    # their own settings (pyproject.toml's addopts), in one process (`-n 0`)
    command = [python, "-m", "pytest", suite.file, "-n", "0", "-q", "-p", "no:cacheprovider"]
    if suite.leave_out:
        command += ["-k", suite.leave_out]
    began, answered = time.monotonic(), len(served.statuses())
    with in_front(proxy) if suite.stored_ids else nullcontext() as front:
        target = f"http://127.0.0.1:{front.port}" if front else proxy.base
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            "TEST_API_BASE_URL": target + suite.base,
        }
        run = subprocess.run(
            command,
            check=False,
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        swapped = front.swapped if front else 0
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    got, statuses = counts(summary), served.statuses()[answered:]
    took = time.monotonic() - began
    print(f"{checkout.name} {suite.file}: {summary}; {len(statuses)} access lines ({took:.1f} s)")
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    assert set(got) <= {"passed", "deselected"}, summary  # nothing failed, skipped or errored
    assert got["passed"] >= suite.at_least, summary
    # the SDKs retry a 5xx (twice): a pass after one must not hide it
    assert not [s for s in statuses if s >= 500], statuses
    # 9 a client (retrieves, deletes, continuations) in 5 clients (sync and async, loose and
    # strict, and aiohttp's)
    assert swapped == (45 if suite.stored_ids else 0)
