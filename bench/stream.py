"""Streams at scale (issue 23, item 4): how many SSE chunks agent-reach relays per second per
core, and what an open idle stream costs it in memory, against nginx relaying the same stream,
in one run.

    .venv/bin/python bench/stream.py [--quick] [--before REV] [--streams 1000] [--drip]

- Upstream: tests/fakes/bench.py on CPU 1. `/long/` answers at once with a stream of
  `LONG_CHUNKS` chat.completion.chunk events shaped as OpenAI sends them, written in one go (so
  the upstream is never what is measured: the proxy reads many events per read); with
  `--drip`, `/drip/`: the same stream one event per write, as a provider sends tokens (the
  upstream then bounds the run, and a proxy reads the fewer events per read the faster it is
  than the upstream: per core then flatters the slower proxy); `/idle/` with one content
  chunk, then nothing.
- Proxies on CPU 0: nginx (one worker, bench/peers's `nginx_proxy_conf`: keep-alive to the
  upstream, `proxy_buffering off`) relaying chat → chat, the floor for one hop; agent-reach
  (bench/peers/agent-reach-stream.yaml) relaying chat → chat, chat → Responses and chat →
  Messages: the client asks in that API, the upstream speaks chat completions SSE. With
  `--before REV` also agent-reach at commit REV, the same three ways (common.py's `build_at`).
- Relay: 32 streams at once, each a new request as soon as the last one ended, for 3 s per
  target, in rounds across the targets so that the machine's slow
  spells hit all alike; the median round. The client is aiohttp in this process (on CPU 1),
  counting SSE events (blank-line separated) in what it reads: a stream counts when it ended
  with all `LONG_CHUNKS` content events in it (one stream per target is parsed in full first,
  bench/peers's `stream_once`, to check that they really are content events of that API;
  a target whose first two such streams fail is left out, said in the output). chunks/s: content chunks relayed per second of the run (the proxy has one core); per
  CPU-second: the same over the user + system time the proxy's process used (per core,
  steadier on a shared machine).
- Idle streams: `--streams` (1,000) at once through each proxy, raw sockets each reading its
  stream's first content event and then holding it open (spread over client keys, `PER_KEY`
  each: a key may have 256 requests under way; more than 1,024 streams would wait for
  agent-reach's upstream connections to one origin), through a proxy started afresh for
  each (memory freed by one relay's streams would be reused by the next's); RSS of the proxy's
  process tree with the first 50 open, with all open (the growth ÷ the streams opened in
  between: per open idle stream) and after they closed. The soft limit of open files is raised
  to the hard one first.
Goal (issue 23): agent-reach's chat → chat chunks/s ≥ 1/10 of nginx's.
Results: bench/results/stream.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from common import (
    PATH,
    THIS_TREE,
    Build,
    Processes,
    Target,
    add_before,
    agent_reach_serve,
    builds,
    cpu_s,
    machine,
    pin_self,
    publish,
    raise_nofile,
    rss_mb,
    start_mock,
)
from ingress import APIS, body
from peers.base import CONFIGS, LOAD_CPU, PROXY_CPU, PROXY_KEY
from peers.contenders import AUTH, Peer, bench_env, nginx_proxy
from peers.install import need_nginx
from peers.scenarios import cold_start, stream_once
from tests.fakes.bench import LONG_CHUNKS

CONFIG = CONFIGS / "agent-reach-stream.yaml"
RELAYS = ("chat", "responses", "messages")  # what the client asks in; the upstream speaks chat
GOAL = 1 / 10  # agent-reach's chat → chat chunks/s per core over nginx's, at least
NGINX = "nginx, chat → chat"
IDLE_MARK = b"t0"  # the text of the idle stream's one content chunk, in every API
WARM = 50  # idle streams opened before the memory they cost is counted
# Idle streams per client key: one key may have 256 requests under way at once
# (server.max_requests_per_key), so the idle streams are spread over keys of their own.
PER_KEY = 200


def idle_keys(streams: int) -> list[str]:
    """The client keys the idle streams are spread over, `PER_KEY` each."""
    return [f"{PROXY_KEY}-idle-{i}" for i in range(-(-streams // PER_KEY))]


@dataclass(frozen=True)
class Settings:
    """How much of everything: the full run, or `--quick` to try the script out."""

    seconds: float = 3.0
    rounds: int = 3
    conns: int = 32
    streams: int = 1000

    @classmethod
    def quick(cls, streams: int) -> Settings:
        return cls(1.0, 1, 8, min(streams, 200))


@dataclass(frozen=True)
class Relay:
    """One relay to measure: a proxy (`peer`) and the request in the client's API."""

    name: str
    peer: Peer | None  # None: straight to the upstream
    target: Target
    idle: Target | None  # the same through the proxy to the idle stream (None: not measured)


def agent_reach(build: Build, env: dict[str, str]) -> Peer:
    """`agent-reach serve` (this tree's or `build`'s) with bench/peers/agent-reach-stream.yaml."""
    plain = Target(0, AUTH, body("chat", "bench", True))
    return Peer(
        build.label,
        lambda port: agent_reach_serve(CONFIG, port, build.executable),
        {"plain": plain},
        env,
    )


def relays(peers: list[Peer], nginx: Peer, upstream: int, source: str) -> list[Relay]:
    """Straight to the upstream, nginx chat → chat, and each agent-reach the three ways, of
    the upstream's stream `source` ("long": at once, "drip": one event per write)."""
    chat = body("chat", "bench", True)
    out = [
        Relay("direct, chat", None, Target(upstream, body=chat, path=f"/{source}{PATH}"), None),
        Relay(
            NGINX,
            nginx,
            Target(nginx.port, AUTH, chat, f"/{source}{PATH}"),
            Target(nginx.port, AUTH, chat, "/idle" + PATH),
        ),
    ]
    route = {} if source == "long" else {"X-Agent-Reach-Route": source}
    for peer in peers:
        for api in RELAYS:
            ask = body(api, "bench", True)
            idle = Target(peer.port, {**AUTH, "X-Agent-Reach-Route": "idle"}, ask, APIS[api])
            relay = Target(peer.port, {**AUTH, **route}, ask, APIS[api])
            out.append(Relay(f"{peer.name}, chat → {api}", peer, relay, idle))
    return out


# -- relay throughput ------------------------------------------------------------------------------


async def relay_run(target: Target, conns: int, seconds: float) -> dict[str, float]:
    """`conns` clients streaming `target` one stream after another for `seconds`: the streams
    that ended whole (every content chunk in them), the others, and the time it took."""
    url = f"http://127.0.0.1:{target.port}{target.path}"
    data, headers = target.body.encode(), target.all_headers()
    whole = broken = 0
    start = time.monotonic()
    stop = start + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal whole, broken
        while time.monotonic() < stop:
            events, last = 0, b""
            try:
                async with session.post(url, data=data, headers=headers) as resp:
                    async for piece in resp.content.iter_any():
                        events += piece.count(b"\n\n") + (last == b"\n" and piece[:1] == b"\n")
                        last = piece[-1:]
                    ok = resp.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok and events >= LONG_CHUNKS:
                whole += 1
            else:
                broken += 1

    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=conns)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        await asyncio.gather(*(client(session) for _ in range(conns)))
    return {"whole": whole, "broken": broken, "seconds": time.monotonic() - start}


def check(relay: Relay) -> str | None:
    """One stream of `relay` parsed in full: None when it carries all `LONG_CHUNKS` content
    events of its API, else what is wrong."""
    t = relay.target
    conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=30)
    try:
        _, arrivals = stream_once(conn, t)
    except (OSError, RuntimeError, http.client.HTTPException, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return None if len(arrivals) == LONG_CHUNKS else f"{len(arrivals)} content events"


def checked(todo: list[Relay]) -> dict[str, str]:
    """Each relay checked (`check`), twice where the first fails: what failed, by relay. A
    relay failing twice is not measured; the run stops if none is left but direct."""
    failed = {}
    for relay in todo:
        if wrong := check(relay):
            again = check(relay)
            failed[relay.name] = wrong if again is None else f"{wrong}; again: {again}"
            print(f"  {relay.name}: {failed[relay.name]}", flush=True)
    return failed


def throughput(todo: list[Relay], settings: Settings) -> dict[str, dict[str, Any]]:
    """Each relay's chunks/s and chunks per CPU-second of its proxy: the median of the rounds
    (by chunks/s)."""
    kept: dict[str, list[dict[str, float]]] = {r.name: [] for r in todo}
    for i in range(settings.rounds):
        for relay in todo if i % 2 == 0 else todo[::-1]:  # no relay always comes first
            pid = relay.peer.proc.pid if relay.peer and relay.peer.proc else None
            used = cpu_s(pid) if pid else 0.0
            run = asyncio.run(relay_run(relay.target, settings.conns, settings.seconds))
            chunks = run["whole"] * LONG_CHUNKS
            run["chunks_per_s"] = chunks / run["seconds"]
            if pid:
                run["proxy_cpu_s"] = cpu_s(pid) - used
                run["chunks_per_cpu_s"] = chunks / max(run["proxy_cpu_s"], 1e-3)
            kept[relay.name].append(run)
            print(f"  {relay.name}: {run['chunks_per_s']:,.0f} chunks/s", flush=True)
    return {
        name: sorted(runs, key=lambda r: r["chunks_per_s"])[len(runs) // 2]
        for name, runs in kept.items()
    }


# -- idle streams -----------------------------------------------------------------------------------


async def hold_idle(target: Target, count: int, pid: int, max_s: float) -> dict[str, Any]:
    """`count` streams of `target` opened (64 at a time, round the `idle_keys`), each read to
    its first content event and then held: the first `WARM` alone, then the rest. The RSS (MB)
    of process `pid` with the first `WARM` open, with all open and after closing; per stream:
    the growth between the first two over the streams opened in between (so what a first
    stream sets up once is not spread over the others)."""
    requests = [
        replace(target, headers={**target.headers, "Authorization": f"Bearer {key}"}).wire()
        for key in idle_keys(count)
    ]
    writers: list[asyncio.StreamWriter] = []
    gate = asyncio.Semaphore(64)
    stop = time.monotonic() + max_s

    async def one(i: int) -> None:
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
            writers.append(writer)
            writer.write(requests[i % len(requests)])
            seen = b""
            while IDLE_MARK not in seen:
                data = await asyncio.wait_for(reader.read(65536), stop - time.monotonic())
                if not data:
                    raise ConnectionError(f"closed before a content event: {seen[-300:]!r}")
                seen += data

    async def batch(first: int, n: int) -> list[BaseException]:
        done = await asyncio.gather(*(one(first + i) for i in range(n)), return_exceptions=True)
        return [d for d in done if isinstance(d, BaseException)]

    began = time.monotonic()
    failures = await batch(0, WARM)
    await asyncio.sleep(0.5)
    warm = rss_mb(pid)
    failures += await batch(WARM, count - WARM)
    opened_s = time.monotonic() - began
    await asyncio.sleep(1.0)
    held = rss_mb(pid)
    for writer in writers:
        writer.close()
    await asyncio.sleep(2.0)
    opened = count - len(failures)
    row: dict[str, Any] = {
        "streams": count,
        "opened": opened,
        "opened_s": opened_s,
        "rss_warm_mb": warm,
        "rss_open_mb": held,
        "rss_after_mb": rss_mb(pid),
        "kb_per_stream": (held - warm) * 1024 / (opened - WARM) if opened > WARM else None,
    }
    if failures:
        row["failure"] = f"{len(failures)} failed, e.g. {type(failures[0]).__name__}: {failures[0]}"
    return row


def idle(procs: Processes, todo: list[Relay], settings: Settings, logs: Path) -> dict[str, Any]:
    """Each relay's idle streams, through a proxy started afresh for it (memory another
    relay's streams left free would be used again, and hide what these cost)."""
    out = {}
    for relay in todo:
        if relay.idle is None or relay.peer is None or relay.peer.proc is None:
            continue
        procs.stop(relay.peer.proc)
        if why := cold_start(procs, relay.peer, 1, logs):
            out[relay.name] = {"failure": f"did not start again: {why}"}
            continue
        assert relay.peer.proc is not None
        target = replace(relay.idle, port=relay.peer.port)
        row = asyncio.run(hold_idle(target, settings.streams, relay.peer.proc.pid, 120.0))
        out[relay.name] = row
        per = row["kb_per_stream"]
        print(
            f"  {relay.name}: {row['opened']} idle streams open, "
            f"{'—' if per is None else f'{per:.1f}'} KB each",
            flush=True,
        )
    return out


# -- the run ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    parser.add_argument("--streams", type=int, default=1000, help="idle streams held at once")
    parser.add_argument(
        "--drip",
        action="store_true",
        help="the upstream writes its stream one event at a time, not at once; no idle "
        "streams (results: bench/results/stream-drip.*)",
    )
    add_before(parser)
    args = parser.parse_args()
    settings = Settings.quick(args.streams) if args.quick else Settings(streams=args.streams)
    nofile = raise_nofile()
    if nofile < 2 * settings.streams + 100:
        sys.exit(
            f"{settings.streams} streams need {2 * settings.streams + 100} open files; "
            f"the hard limit is {nofile}"
        )
    load = os.getloadavg()
    agents = builds(args.before)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-stream-"))
    nginx_install = need_nginx(workdir)
    pinned = pin_self(LOAD_CPU)
    with Processes() as procs:
        upstream = start_mock(procs, cpu=LOAD_CPU)
        env = bench_env(upstream, upstream, upstream)
        env["BENCH_PROXY_KEYS"] = ",".join([PROXY_KEY, *idle_keys(settings.streams)])
        nginx = nginx_proxy(nginx_install.path, env, workdir)
        nginx.raw = None
        peers = [agent_reach(b, env) for b in agents]
        for peer in (nginx, *peers):
            why = cold_start(procs, peer, 1, workdir)
            if why is not None:
                sys.exit(f"{peer.name} did not start: {why}")
        todo = relays(peers, nginx, upstream, "drip" if args.drip else "long")
        failed = checked(todo)
        todo = [r for r in todo if "; again: " not in failed.get(r.name, "")]
        if NGINX not in {r.name for r in todo}:
            sys.exit(f"{NGINX}: {failed[NGINX]}")
        rates = throughput(todo, settings)
        held = {} if args.drip else idle(procs, todo, settings, workdir)  # the same either way
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        "load_average_at_start": [round(x, 2) for x in load],
        "pinning": f"proxies on CPU {PROXY_CPU}, the rest on CPU {LOAD_CPU}" if pinned else "none",
        "settings": {**vars(settings), "chunks_per_stream": LONG_CHUNKS, "drip": args.drip},
        "nginx": nginx_install.detail.removeprefix("nginx version: nginx/"),
        "relay": rates,
        "streams_checked": failed,
        "idle": held,
    }
    results["vs_nginx"] = ratios(results)
    publish("stream-drip" if args.drip else "stream", results, markdown(results))


def ratios(r: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each relay's chunks/s and chunks per CPU-second over nginx's."""
    base = r["relay"][NGINX]
    out: dict[str, dict[str, float | None]] = {}
    for name, row in r["relay"].items():
        if name == NGINX or name.startswith("direct"):
            continue
        per_cpu = row.get("chunks_per_cpu_s")
        out[name] = {
            "chunks_per_s": row["chunks_per_s"] / base["chunks_per_s"],
            "chunks_per_cpu_s": per_cpu / base["chunks_per_cpu_s"] if per_cpu else None,
        }
    return out


def _ratio(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f}×" if x >= 1 else f"1/{1 / x:.1f}"


def markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r["settings"]
    load = ", ".join(f"{x:g}" for x in r["load_average_at_start"])
    lines = [
        "# Streams at scale: agent-reach against nginx relaying the same SSE stream",
        "",
        f"{r['when']}, bench/stream.py; {m['cpu']}, {m['cpus']} CPUs, Python {m['python']}, "
        f"nginx {r['nginx']}; pinning: {r['pinning']}; load average at the start {load} "
        "(on a 2-core machine shared with other work, figures move by tens of %).",
        f"Upstream: tests/fakes/bench.py, {s['chunks_per_stream']} chat.completion.chunk "
        f"events per stream written {'one at a time' if s.get('drip') else 'at once'}; {s['conns']} streams at once, {s['seconds']:g} s per "
        f"target per round, median of {s['rounds']} rounds; client: aiohttp.",
        "",
        "| relay (client API ← upstream chat SSE) | chunks/s per core | ÷ nginx "
        "| chunks/s | ÷ nginx | proxy's CPU use | streams (broken) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in r["relay"].items():
        vs = r["vs_nginx"].get(name, {})
        per_cpu = row.get("chunks_per_cpu_s")
        busy = f"{row['proxy_cpu_s'] / row['seconds']:.0%}" if "proxy_cpu_s" in row else "—"
        lines.append(
            f"| {name} | {'—' if per_cpu is None else f'{per_cpu:,.0f}'} "
            f"| {_ratio(vs.get('chunks_per_cpu_s'))} | {row['chunks_per_s']:,.0f} "
            f"| {_ratio(vs.get('chunks_per_s'))} | {busy} "
            f"| {row['whole']:.0f} ({row['broken']:.0f}) |"
        )
    nginx = r["relay"][NGINX]
    if nginx["proxy_cpu_s"] < 0.9 * nginx["seconds"]:
        lines += [
            "",
            "nginx did not use all of its core: the client and the upstream (CPU 1) bound its "
            "chunks/s, so that figure is a floor and its ratio flatters agent-reach; per core "
            "is the figure that compares the relays.",
        ]
    for name, why in r["streams_checked"].items():
        lines.append(f"\n- {name}: its first checked stream failed: {why}.")
    chat = r["vs_nginx"].get(f"{THIS_TREE.label}, chat → chat")
    if chat and chat["chunks_per_cpu_s"] is not None:
        met = "met" if chat["chunks_per_cpu_s"] >= GOAL else "MISSED"
        lines += [
            "",
            f"Goal: agent-reach chat → chat ≥ 1/{1 / GOAL:.0f} of nginx's chunks/s per core: "
            f"{_ratio(chat['chunks_per_cpu_s'])}, {met} (per second of the run: "
            f"{_ratio(chat['chunks_per_s'])}).",
        ]
    if not r["idle"]:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"| {s['streams']:,} open idle streams | opened (s) | RSS MB, {WARM} open | all open "
        "| per stream | RSS after closing MB |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in r["idle"].items():
        per = row["kb_per_stream"]
        failure = f" ({row['failure']})" if row.get("failure") else ""
        lines.append(
            f"| {name} | {row['opened']}{failure} ({row['opened_s']:.1f} s) "
            f"| {row['rss_warm_mb']:.1f} | {row['rss_open_mb']:.1f} "
            f"| {'—' if per is None else f'{per:.1f} KB'} | {row['rss_after_mb']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
