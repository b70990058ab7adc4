"""`make chaos`: the proxy in front of providers that misbehave at random, for a bounded time.

    .venv/bin/python bench/chaos.py [--seconds 120] [--concurrency 8] [--json] [--before REV]

Four simulated providers switch, every `--switch` seconds, to one of: ok, slow first byte,
refusing/resetting connections, hanging, 500, 429 with Retry-After, 401, an HTML 200, broken
JSON, an error inside a 200, and a stream cut after its first chunk. A fifth provider sits in a
network namespace that answers nothing, not even ARP, so its packets are silently dropped
(root only; skipped with a printed reason elsewhere). Real OpenAI SDK clients send a mix of streamed and plain requests through
`agent-reach serve` the whole time. At the end it prints, and checks:
- success rate of the requests during which at least one provider stayed healthy: 100%
  (a stream that its provider cut after the first chunk is counted apart: it must end with a
  visible error event, never silently). Healthy means answering (ok or slow) and not put aside
  for a refused key: a provider that answered 401 is out, by contract (protocol §4.2), until
  `auth_cooldown_s` has passed and its half-open trial has been answered, whatever its mode;
  the requests that failed while one provider was healthy are printed by outcome;
- visible mid-stream cuts beside the streams the providers cut and the streams sent, and
  their rate per 100 streams (the count grows with the requests a run makes; the rate does not);
- requests that took longer than the deadline: 0;
- silent truncations (a stream that ended with neither [DONE] nor an error event): 0;
- tracebacks or unhandled errors in the proxy's log: 0;
- the proxy's RSS and open file descriptors before and after.
With `--before REV` (`make chaos BEFORE=REV`) the same run, same seed, is made again with
agent-reach at commit REV (bench/common.py's `build_at`) and the two are printed side by side.
Exit 0 when every check holds (this tree's). Traffic goes only to 127.0.0.1 and the namespace it creates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from aiohttp import web

from common import THIS_TREE, Build, add_before, builds, rss_mb, side_by_side, sse_chunk
from tests.fakes.serving import Threaded

HEALTHY = ("ok", "slow")
BROKEN = ("reset", "hang", "500", "429", "401", "html", "brokenjson", "error200", "cut")
DEADLINE_MS = 6000
AUTH_COOLDOWN_S = 3.0  # the `circuit.auth_cooldown_s` the proxy is given
COMPLETION = {
    "id": "chatcmpl-chaos",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "chaos",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    return sse_chunk(text, finish, "chaos")


@dataclass
class Spell:
    """A time a provider spent in one mode: when it began, and in `cut` mode the streams it
    cut and how long after its start the last of them was."""

    since: float
    cuts: int = 0
    last_s: float = 0.0

    def cut(self) -> None:
        self.cuts += 1
        self.last_s = time.monotonic() - self.since


class Simulated:
    """One misbehaving provider; `mode` says how it answers right now."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode = "ok"
        self.port = 0
        self.spell = Spell(time.monotonic())  # the current mode's
        self.spells: list[Spell] = []  # its spells in `cut` mode, ended
        # When it last answered 401 (its circuit opens for `auth_cooldown_s`), when the first
        # request after that cooldown (the circuit's half-open trial) came, and was answered.
        self.refused_at: float | None = None
        self.trial_at: float | None = None
        self.released_at: float | None = None

    def switch(self, mode: str) -> None:
        """Answer as `mode` from now on; a spell in `cut` mode is kept."""
        if self.mode == "cut":
            self.spells.append(self.spell)
        self.mode, self.spell = mode, Spell(time.monotonic())

    def out(self, start: float) -> bool:
        """Whether a request from `start` until now may have found it put aside for a refused
        key: in the cooldown of its last 401, or while the trial after it was under way (a
        request that reached it then either was that trial or was turned away)."""
        refused, trial, released = self.refused_at, self.trial_at, self.released_at
        if refused is None:
            return False
        if trial is None:
            return start < refused + AUTH_COOLDOWN_S
        return released is None or start < released

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode, spell, stream = self.mode, self.spell, bool(body.get("stream"))
        now, refused = time.monotonic(), self.refused_at
        trial = refused is not None and self.trial_at is None and now >= refused + AUTH_COOLDOWN_S
        if trial:
            self.trial_at = now
        try:
            return await self._answer(request, mode, stream, spell)
        finally:
            if mode == "401":
                self.refused_at, self.trial_at, self.released_at = time.monotonic(), None, None
            elif trial:
                self.released_at = time.monotonic()

    async def _answer(
        self, request: web.Request, mode: str, stream: bool, spell: Spell
    ) -> web.StreamResponse:
        if mode == "reset":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if mode == "hang":
            await asyncio.sleep(60)
        if mode == "slow":
            await asyncio.sleep(0.3)
        if mode in ("500", "429", "401"):
            headers = {"Retry-After": "1"} if mode == "429" else {}
            return web.json_response(
                {"error": {"message": mode, "type": "chaos"}}, status=int(mode), headers=headers
            )
        if mode == "html":
            return web.Response(text="<html>maintenance</html>", content_type="text/html")
        if mode == "brokenjson":
            return web.Response(body=b'{"choices": [', content_type="application/json")
        if mode == "error200":
            return web.json_response({"error": {"message": "something odd", "code": "E1"}})
        if not stream:
            return web.json_response(COMPLETION)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk("po"))
        if mode == "cut":
            assert request.transport is not None
            spell.cut()  # the spell the request came in, even if the mode switched since
            request.transport.close()
            return resp
        await resp.write(_chunk("ng"))
        await resp.write(_chunk(None, "stop"))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(self, _: web.Request) -> web.Response:
        if self.mode in HEALTHY:
            return web.json_response(
                {"object": "list", "data": [{"id": "chaos", "object": "model"}]}
            )
        return web.json_response({"error": "down"}, status=503)


class Providers:
    """The simulated providers, served from a thread with its own event loop."""

    def __init__(self, count: int) -> None:
        self.sims = [Simulated(f"sim{i}") for i in range(count)]
        self.timeline: list[tuple[float, frozenset[str]]] = []
        self.server = Threaded()
        for sim in self.sims:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", sim.handle)
            app.router.add_get("/v1/models", sim.models)
            sim.port = self.server.serve(app, cancel=True)
        self.mark()

    def mark(self) -> None:
        healthy = frozenset(s.name for s in self.sims if s.mode in HEALTHY)
        self.timeline.append((time.monotonic(), healthy))

    def shuffle(self, rng: random.Random) -> None:
        """New modes for all; most of the time at least one provider stays healthy."""
        modes = [rng.choice(BROKEN + HEALTHY) for _ in self.sims]
        if rng.random() < 0.85 and not any(mode in HEALTHY for mode in modes):
            modes[rng.randrange(len(modes))] = rng.choice(HEALTHY)
        for sim, mode in zip(self.sims, modes, strict=True):
            sim.switch(mode)
        self.mark()

    def answering(self, start: float, end: float) -> frozenset[str]:
        """The providers that answered (ok or slow) during the whole of [start, end]."""
        alive: frozenset[str] | None = None
        for i, (t, healthy) in enumerate(self.timeline):
            nxt = self.timeline[i + 1][0] if i + 1 < len(self.timeline) else float("inf")
            if nxt <= start or t >= end:
                continue
            alive = healthy if alive is None else alive & healthy
        return alive or frozenset()

    def healthy(self, answering: frozenset[str], start: float) -> bool:
        """Whether one of the `answering` providers was healthy for a request from `start`
        (asked when it has ended): never out for a key it refused before."""
        return any(not sim.out(start) for sim in self.sims if sim.name in answering)

    def stop(self) -> None:
        self.server.stop()


class Blackhole:
    """A host in a network namespace of our own whose packets are silently dropped: a connect
    to it gets no answer at all, not even a refusal, until the connect timeout."""

    def __init__(self) -> None:
        self.ns = f"arc{os.getpid() % 100000}"
        self.address = "169.254.77.2"
        self.reason = ""
        if os.geteuid() != 0 or not shutil.which("ip"):
            self.reason = "needs root and iproute2"
            return
        a, b = f"{self.ns}a", f"{self.ns}b"
        steps = [
            ["ip", "netns", "add", self.ns],
            ["ip", "link", "add", a, "type", "veth", "peer", "name", b],
            ["ip", "link", "set", b, "netns", self.ns],
            ["ip", "addr", "add", "169.254.77.1/30", "dev", a],
            ["ip", "link", "set", a, "up"],
            ["ip", "netns", "exec", self.ns, "ip", "addr", "add", f"{self.address}/30", "dev", b],
            ["ip", "netns", "exec", self.ns, "ip", "link", "set", b, "up"],
            # Its interface answers no ARP, so nothing sent to it is ever delivered or answered:
            # a silent drop that needs no netfilter or netem support in the kernel.
            ["ip", "netns", "exec", self.ns, "ip", "link", "set", "dev", b, "arp", "off"],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode:
                self.reason = f"{' '.join(step[:4])}…: {done.stderr.strip()}"
                self.remove()
                return

    @property
    def available(self) -> bool:
        return not self.reason

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", f"{self.ns}a"], capture_output=True, check=False)


@dataclass
class Tally:
    requests: int = 0
    ok: int = 0
    covered: int = 0  # requests during which some provider stayed healthy
    key_out: int = 0  # requests whose answering providers were all out for a refused key
    covered_ok: int = 0
    streams: int = 0
    visible_cuts: int = 0  # streams cut after the first chunk, ended with an error event
    silent_truncations: int = 0
    over_deadline: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # while no provider was healthy
    covered_failures: dict[str, int] = field(default_factory=dict)  # while one was
    slowest_ms: float = 0.0


async def client_loop(
    base: str, providers: Providers, stop_at: float, tally: Tally, rng: random.Random
) -> None:
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="chaos", max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "ping"}]
    try:
        while time.monotonic() < stop_at:
            stream = rng.random() < 0.5
            start = time.monotonic()
            outcome = "ok"
            try:
                if stream:
                    async with client.chat.completions.with_streaming_response.create(
                        model="chaos",
                        messages=messages,
                        stream=True,  # type: ignore[arg-type]
                    ) as resp:
                        lines = [line async for line in resp.iter_lines() if line]
                    last = lines[-1] if lines else ""
                    if last == "data: [DONE]":
                        outcome = "ok"
                    elif '"error"' in last:
                        outcome = "cut"
                    else:
                        outcome = "silent"
                else:
                    await client.chat.completions.create(model="chaos", messages=messages)  # type: ignore[arg-type]
            except openai.APIStatusError as exc:
                outcome = f"http_{exc.status_code}"
            except openai.APIError as exc:
                outcome = type(exc).__name__
            end = time.monotonic()
            ms = (end - start) * 1000
            tally.requests += 1
            tally.streams += stream
            tally.slowest_ms = max(tally.slowest_ms, ms)
            tally.over_deadline += ms > DEADLINE_MS + 1000
            answering = providers.answering(start, end)
            covered = providers.healthy(answering, start)
            tally.key_out += bool(answering) and not covered
            if outcome == "ok":
                tally.ok += 1
            elif outcome == "cut":
                tally.visible_cuts += 1
            elif outcome == "silent":
                tally.silent_truncations += 1
            else:
                failures = tally.covered_failures if covered else tally.failures
                failures[outcome] = failures.get(outcome, 0) + 1
            if covered and outcome != "cut":
                tally.covered += 1
                tally.covered_ok += outcome == "ok"
    finally:
        await client.close()


def cut_spells(spells: list[Spell]) -> dict[str, Any]:
    """How the cuts came: in how many spells of a provider in `cut` mode that cut streams, how
    many each cut (its median) and how long after the switch the last of them came (median,
    ms). A proxy stops sending streams to a cutting provider only once it knows (a health
    check, its circuit), so a faster proxy sends more of them in the same time."""
    cutting = [spell for spell in spells if spell.cuts]
    if not cutting:
        return {"cut_spells": 0}
    return {
        "cut_spells": len(cutting),
        "streams_cut_per_spell_p50": statistics.median(s.cuts for s in cutting),
        "last_cut_after_switch_ms_p50": round(statistics.median(s.last_s for s in cutting) * 1000),
    }


def proc_facts(pid: int) -> dict[str, float]:
    return {"rss_mb": round(rss_mb(pid), 1), "open_fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def drive(args: argparse.Namespace, build: Build) -> dict[str, Any]:
    rng = random.Random(args.seed)
    providers = Providers(4)
    hole = Blackhole()
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-chaos-"))
    provider_cfg = [
        {"name": s.name, "endpoint": f"http://127.0.0.1:{s.port}/v1/chat/completions"}
        for s in providers.sims
    ]
    if hole.available:
        provider_cfg.insert(
            1, {"name": "blackhole", "endpoint": f"http://{hole.address}:8080/v1/chat/completions"}
        )
    config = {
        "health": {"mode": "cached", "ttl_s": 1},
        "state": "memory://",
        "deadline_ms": DEADLINE_MS,
        "circuit": {"failures": 2, "cooldown_s": 2, "auth_cooldown_s": AUTH_COOLDOWN_S},
        "defaults": {"timeout": {"connect": 300, "read": 700}},
        "providers": provider_cfg,
    }
    (workdir / "chaos.json").write_text(json.dumps(config))
    log_path = workdir / "proxy.log"
    env = {k: v for k, v in os.environ.items() if k != "AGENT_REACH_API_KEYS"}
    with log_path.open("w") as log:
        proxy = subprocess.Popen(
            [build.executable, "--config", str(workdir / "chaos.json"), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    assert proxy.stdout is not None
    port = int(proxy.stdout.readline().split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
    base = f"http://127.0.0.1:{port}"
    tally = Tally()
    try:
        warm = openai.AsyncOpenAI(base_url=base + "/v1", api_key="chaos", max_retries=0)
        for _ in range(50):
            await warm.chat.completions.create(
                model="chaos", messages=[{"role": "user", "content": "hi"}]
            )
        await warm.close()
        before = proc_facts(proxy.pid)
        stop_at = time.monotonic() + args.seconds

        async def switcher() -> None:
            while time.monotonic() < stop_at:
                await asyncio.sleep(args.switch)
                providers.shuffle(rng)
            for sim in providers.sims:  # end calm, so that idle resources can be compared
                sim.switch("ok")
            providers.mark()

        await asyncio.gather(
            switcher(),
            *(
                client_loop(base, providers, stop_at, tally, random.Random(rng.random()))
                for _ in range(args.concurrency)
            ),
        )
        await asyncio.sleep(1.0)
        after = proc_facts(proxy.pid)
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(20)
        proxy.stdout.close()
        providers.stop()
        if hole.available:
            hole.remove()
    text = log_path.read_text()
    unhandled = sum(
        text.count(marker)
        for marker in ("Traceback", "Error handling request", "Unhandled exception")
    )
    if not unhandled:  # else the proxy's log stays, for a look (its path is in the figures)
        shutil.rmtree(workdir, ignore_errors=True)
    rate = tally.covered_ok / tally.covered if tally.covered else None
    spells = [spell for sim in providers.sims for spell in sim.spells]  # all ended "ok"
    return {
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "blackhole": "on" if hole.available else f"skipped: {hole.reason}",
        "requests": tally.requests,
        "answered": tally.ok,
        "covered_requests": tally.covered,
        "answering_but_out_for_a_refused_key": tally.key_out,
        "success_rate_while_one_healthy": rate,
        "failures_while_one_healthy": tally.covered_failures,
        "streams": tally.streams,
        "streams_cut_by_a_provider": sum(spell.cuts for spell in spells),
        "visible_midstream_cuts": tally.visible_cuts,
        "visible_cuts_per_100_streams": round(100 * tally.visible_cuts / max(tally.streams, 1), 2),
        **cut_spells(spells),
        "silent_truncations": tally.silent_truncations,
        "over_deadline": tally.over_deadline,
        "slowest_ms": round(tally.slowest_ms),
        "failures_when_none_healthy": tally.failures,
        "unhandled_in_log": unhandled,
        **({"proxy_log": str(log_path)} if unhandled else {}),
        "proxy_before": before,
        "proxy_after": after,
        "switches": len(providers.timeline) - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--switch", type=float, default=0.7, help="seconds between mode changes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    add_before(parser)
    args = parser.parse_args()
    runs = {build.label: run(args, build) for build in builds(args.before)}
    if args.json:
        print(json.dumps(runs if args.before else runs[THIS_TREE.label], indent=2))
    elif args.before:
        print(side_by_side(runs))
    sys.exit(0 if all(runs[THIS_TREE.label]["checks"].values()) else 1)


def run(args: argparse.Namespace, build: Build) -> dict[str, Any]:
    """One chaos run through `build`'s agent-reach: its figures and checks (printed unless
    `--json`)."""
    result = asyncio.run(drive(args, build))
    checks = {
        "success rate while one provider healthy is 100%": result["success_rate_while_one_healthy"]
        in (1.0, None),
        "no request over the deadline": result["over_deadline"] == 0,
        "no silent truncation": result["silent_truncations"] == 0,
        "no unhandled error in the log": result["unhandled_in_log"] == 0,
    }
    result["checks"] = checks
    if not args.json:
        print(f"== {build.label}")
        for key, value in result.items():
            if key != "checks":
                print(f"{key:32} {value}")
        for name, ok in checks.items():
            print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return result


if __name__ == "__main__":
    main()
