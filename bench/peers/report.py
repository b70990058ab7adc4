"""The results as figures: ratios against nginx and an older commit, the targets met, the
Markdown table and the chart."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from common import HERE, RESULTS

from .base import AR, INSTALLS, NGINX
from .contenders import remembered

# -- targets and report --------------------------------------------------------------------------


# The targets of issue 6 for agent-reach: (what, where in the results, limit, unit, at least?).
TARGETS = [
    ("added latency p50, 1 in flight", ("latency_ms", "added_p50"), 0.5, "ms", False),
    ("added latency p99, 1 in flight", ("latency_ms", "added_p99"), 2.0, "ms", False),
    ("throughput vs LiteLLM, 32 in flight", ("times", "LiteLLM", "32"), 50.0, "×", True),
    ("throughput vs LiteLLM, 128 in flight", ("times", "LiteLLM", "128"), 50.0, "×", True),
    ("throughput vs Portkey, 32 in flight", ("times", "Portkey", "32"), 3.0, "×", True),
    ("throughput vs Portkey, 128 in flight", ("times", "Portkey", "128"), 3.0, "×", True),
    ("refused primary → backup, added p50", ("failover", "refused", "added_p50"), 1.0, "ms", False),
    ("streaming added TTFB p50", ("streaming", "added_ttfb_p50"), 1.0, "ms", False),
    ("RSS idle", ("rss_mb", "idle"), 60.0, "MB", False),
    ("RSS flat: growth over the last N requests", ("rss_mb", "growth_pct"), 5.0, "%", False),
    ("cold start, spawn → first 200 (median)", ("cold_start_s", "median"), 0.5, "s", False),
]
VS_NGINX: list[tuple[str, tuple[str, ...], tuple[str, ...], float, bool]] = [
    (
        "added latency p50, 1 in flight",
        ("latency_ms", AR, "added_p50"),
        ("latency_ms", NGINX, "added_p50"),
        3.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, every request pays",
        ("failover", AR, "refused", "added_p50"),
        ("failover", NGINX, "refused", "added_p50"),
        2.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, once remembered",
        ("failover", remembered(AR), "refused", "added_p50"),
        ("failover", remembered(NGINX), "refused", "added_p50"),
        2.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, every request pays, ÷ nginx's hop (the issue's wording)",
        ("failover", AR, "refused", "added_p50"),
        ("latency_ms", NGINX, "added_p50"),
        2.0,
        False,
    ),
    (
        "req/s, 32 in flight",
        ("throughput", "32", AR, "rps"),
        ("throughput", "32", NGINX, "rps"),
        1 / 20,
        True,
    ),
]
# How the two peers that remember a dead upstream are run raw and as their defaults run them.
REMEMBERING = {
    AR: (
        "bench/peers/agent-reach-failover.yaml: no health checks, a circuit that never opens",
        "agent-reach.yaml: health checks and circuit breakers",
    ),
    NGINX: (
        "max_fails=0: every request tries the failing server first",
        "max_fails=1 fail_timeout=10s: a failed server is left alone for 10 s",
    ),
}


# A difference of p50s this small is no cost: two columns doing the same work (a dead upstream
# once remembered, against the backup alone) differ by up to 0.008 ms here, either way.
NOISE_MS = 0.010


def _times(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio >= 1 or ratio <= 0 else f"{ratio:.3f}× (1/{1 / ratio:.0f})"


def vs_nginx(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Item 6's ratios of agent-reach's figures to nginx's, each met or missed."""
    rows = []
    for what, mine_at, theirs_at, limit, at_least in VS_NGINX:
        mine, theirs = _get(r, *mine_at), _get(r, *theirs_at)
        unit = "req/s" if mine_at[0] == "throughput" else "ms"
        goal = f"{limit:g}×" if limit >= 1 else f"1/{1 / limit:.0f}"
        target = f"{'≥' if at_least else '≤'} {goal}"
        row: dict[str, Any] = {"what": what, "agent-reach": mine, "nginx": theirs}
        row |= {"unit": unit, "target": target, "ratio": None, "met": None, "note": ""}
        if mine is None or theirs is None:
            row["note"] = "not measured"
        elif mine <= 0 and not at_least:
            row |= {"met": True, "note": "agent-reach's figure is ≤ 0: nothing measurable added"}
        elif theirs <= (NOISE_MS if unit == "ms" else 0):
            row["note"] = f"nginx's figure is {theirs:.3f} {unit}: within noise, no ratio"
        else:
            row["ratio"] = mine / theirs
            row["met"] = row["ratio"] >= limit if at_least else row["ratio"] <= limit
        direct = _get(r, "throughput", "32", "direct", "rps")
        if unit == "req/s" and theirs and direct and theirs >= 0.9 * direct:
            row["note"] = (
                "nginx is within 10 % of direct: CPU 1 (upstream and wrk) bounds it, so its "
                "figure is a floor and the ratio flatters agent-reach"
            )
        rows.append(row)
    return rows


def vs_before(r: dict[str, Any], before: list[str]) -> list[dict[str, Any]]:
    """agent-reach's figures over an older commit's measured beside it (`--before`): req/s at
    32 and 128 in flight, and the added p50 at 1 in flight."""
    rows = []
    for label in before:
        for what, at in (
            ("req/s, 32 in flight", ("throughput", "32", "{}", "rps")),
            ("req/s, 128 in flight", ("throughput", "128", "{}", "rps")),
            ("added latency p50, 1 in flight (ms)", ("latency_ms", "{}", "added_p50")),
        ):
            mine, theirs = (_get(r, *(k.format(name) for k in at)) for name in (AR, label))
            ratio = mine / theirs if mine is not None and theirs else None
            row = {"what": what, "before": label, "agent-reach": mine, "then": theirs}
            rows.append({**row, "ratio": ratio})
    return rows


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def targets_met(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target next to agent-reach's measured figure: met or missed, and by how much."""
    ar = "agent-reach"
    times = {
        peer: {
            c: _get(r, "throughput", c, ar, "rps") / theirs
            for c in ("32", "128")
            if (theirs := _get(r, "throughput", c, peer, "rps"))
        }
        for peer in ("LiteLLM", "Portkey")
    }
    rss = _get(r, "rss_mb", ar) or {}
    if rss.get("warm") and rss.get("after"):
        rss["growth_pct"] = (rss["after"] - rss["warm"]) / rss["warm"] * 100
    mine = {k: v.get(ar) if isinstance(v, dict) else None for k, v in r.items()}
    mine["times"] = times
    rows = []
    for what, path, limit, unit, at_least in TARGETS:
        measured = _get(mine, *path)
        goal = f"{'≥' if at_least else '≤'} {limit:g}{'' if unit == '×' else ' '}{unit}"
        row: dict[str, Any] = {"what": what, "target": goal, "measured": measured, "unit": unit}
        if what.startswith("RSS flat"):
            row["what"] = (
                f"RSS flat: growth from {rss.get('warm_requests')} to {rss.get('requests')} requests"
            )
        if measured is None:
            rows.append({**row, "met": None, "by": "not measured"})
            continue
        met = measured >= limit if at_least else measured <= limit
        if at_least:
            by = f"{measured / limit:.2f}× the target"
        else:
            by = f"{abs(limit - measured):.3g} {unit} {'under' if met else 'over'}"
        rows.append({**row, "met": met, "by": by})
    return rows


def _cell(value: float | None, added: float | None = None, digits: int = 2) -> str:
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    return f"{text} ({added:+.{digits}f})" if added is not None else text


def markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r.get("settings", {})
    peers = r.get("peers", [])
    cols = ["direct", *peers]
    lines = [
        "# agent-reach and its peers",
        "",
        f"{r['when']}, `make bench` (bench/peers), {r.get('duration_s', 0):.0f} s including installs.",
        f"Machine: {m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}.",
        f"Pinning: {r.get('pinning', '?')}. Load: {r.get('load_generator', '?')}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items()) + ".",
        "Upstream: nginx (one worker, fixed chat.completion) on loopback; for streaming "
        f"tests/fakes/bench.py ({_get(r, 'streaming', 'upstream')}).",
        "The nginx column: a second nginx, one worker, as a plain reverse proxy in front of the "
        "same upstreams (keep-alive to them, a path prefix per scenario; failover by an upstream "
        "group, the failing server first and the real one `backup`, `proxy_next_upstream error` "
        "or `http_500 non_idempotent`; for 500 → backup its failing server is a second port of "
        "the upstream nginx answering 500 on every path).",
        f"Method: 1 in flight: {s.get('latency_requests')} requests kept per column from one "
        "Python client, keep-alive, interleaved rounds of 100 (the first 10 of a round not kept); "
        f"throughput: wrk, 1 thread, {s.get('load_seconds'):g} s per run; failover: "
        f"{s.get('failover_requests')} requests per chain, against the same peer sending to the "
        f"backup alone; streaming: {s.get('streams')} streams per column; RSS: VmRSS of the "
        f"process tree; cold start: median of {s.get('cold_runs')} spawns.",
        "",
    ]
    for name, why in {**r.get("unavailable", {}), **r.get("left_out", {})}.items():
        lines.append(f"- Not measured: {name}: {why}.")
    lines += ["", "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]

    def row(label: str, cell: Callable[[str], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(c) for c in cols) + " |")

    lat = r.get("latency_ms", {})
    row(
        "1 in flight p50 ms (added)",
        lambda c: _cell(
            _get(lat, c, "p50"), None if c == "direct" else _get(lat, c, "added_p50"), 3
        ),
    )
    row(
        "1 in flight p99 ms (added)",
        lambda c: _cell(
            _get(lat, c, "p99"), None if c == "direct" else _get(lat, c, "added_p99"), 3
        ),
    )
    for conns in ("32", "128"):
        tp = _get(r, "throughput", conns) or {}
        row(f"{conns} in flight req/s", lambda c, tp=tp: _cell(_get(tp, c, "rps"), digits=0))
        row(f"{conns} in flight p99 ms", lambda c, tp=tp: _cell(_get(tp, c, "p99_ms")))
        row(
            f"{conns} in flight non-2xx / socket errors",
            lambda c, tp=tp: (
                "—" if c not in tp else f"{tp[c]['non_2xx']:.0f} / {tp[c]['socket_errors']:.0f}"
            ),
        )
    fo = r.get("failover", {})
    for scenario, label in (("refused", "primary refuses"), ("error500", "primary answers 500")):
        for q in ("p50", "p99"):
            row(
                f"{label} → backup, {q} ms (added vs backup alone)",
                lambda c, s=scenario, q=q: _cell(
                    _get(fo, c, s, q), _get(fo, c, s, f"added_{q}"), 3
                ),
            )
    st = r.get("streaming", {})
    row(
        "streaming TTFB p50 ms (added)",
        lambda c: _cell(
            _get(st, c, "ttfb_ms", "p50"), None if c == "direct" else _get(st, c, "added_ttfb_p50")
        ),
    )
    row(
        "streaming chunk gap p50 ms (added)",
        lambda c: _cell(
            _get(st, c, "gap_ms", "p50"), None if c == "direct" else _get(st, c, "added_gap_p50")
        ),
    )
    row(
        "streaming chunk gap p99 ms (added)",
        lambda c: _cell(
            _get(st, c, "gap_ms", "p99"), None if c == "direct" else _get(st, c, "added_gap_p99")
        ),
    )
    row("streaming content chunks seen (min)", lambda c: str(_get(st, c, "chunks_min") or "—"))
    row(
        "streaming chunks arriving with the first (median)",
        lambda c: _cell(_get(st, c, "first_burst_median"), digits=0),
    )
    rss = r.get("rss_mb", {})
    row("RSS idle MB", lambda c: _cell(_get(rss, c, "idle"), digits=1))
    for when, count in (("warm", "warm_requests"), ("after", "requests")):
        row(
            f"RSS MB after N requests ({'throughput runs' if when == 'warm' else 'all'})",
            lambda c, w=when, n=count: "—" if c not in rss else f"{rss[c][w]:.1f} (N={rss[c][n]})",
        )
    cold = r.get("cold_start_s", {})
    row(
        "cold start s, spawn → first 200 (median)",
        lambda c: _cell(_get(cold, c, "median"), digits=3),
    )
    for peer, (raw, defaults) in REMEMBERING.items():
        if once := _get(fo, remembered(peer)):
            lines += [
                "",
                f"{peer}'s failover rows are raw ({raw}). With its defaults ({defaults}) the "
                "failing upstream is **once remembered**: refused → backup p50 "
                f"{_cell(_get(once, 'refused', 'p50'), _get(once, 'refused', 'added_p50'), 3)} ms, "
                "500 → backup p50 "
                f"{_cell(_get(once, 'error500', 'p50'), _get(once, 'error500', 'added_p50'), 3)} ms.",
            ]
    lines += [
        "",
        "| agent-reach ÷ nginx (issue 13, item 6) | agent-reach | nginx | ratio | goal | |",
        "|---|---|---|---|---|---|",
    ]
    for v in r.get("vs_nginx", []):
        digits = 0 if v["unit"] == "req/s" else 3
        figures = [_cell(v[k], digits=digits) + f" {v['unit']}" for k in ("agent-reach", "nginx")]
        ratio = "—" if v["ratio"] is None else _times(v["ratio"])
        verdict = "n/a" if v["met"] is None else ("met" if v["met"] else "MISSED")
        note = f": {v['note']}" if v["note"] else ""
        lines.append(
            f"| {v['what']} | {' | '.join(figures)} | {ratio} | {v['target']} | {verdict}{note} |"
        )
    if r.get("vs_before"):
        lines += ["", "| agent-reach ÷ an older commit, beside it | now | then | ratio |"]
        lines.append("|---|---|---|---|")
        for v in r["vs_before"]:
            digits = 0 if v["what"].startswith("req/s") else 3
            figures = " | ".join(_cell(v[k], digits=digits) for k in ("agent-reach", "then"))
            ratio = "—" if v["ratio"] is None else _times(v["ratio"])
            lines.append(f"| {v['what']}, vs {v['before']} | {figures} | {ratio} |")
    lines += ["", "| agent-reach target | goal | measured | |", "|---|---|---|---|"]
    for t in r.get("targets", []):
        unit = "" if t.get("unit") == "×" else " "
        measured = "—" if t["measured"] is None else f"{t['measured']:.3g}{unit}{t['unit']}"
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"| {t['what']} | {t['target']} | {measured} | {verdict}, {t['by']} |")
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any]) -> None:
    python = INSTALLS / "plot" / "bin" / "python"
    if not _get(results, "installs", "matplotlib", "ok") or not python.exists():
        print("chart: matplotlib unavailable, no latest.png")
        return
    out = subprocess.run(
        [
            str(python),
            str(HERE / "chart.py"),
            str(RESULTS / "latest.json"),
            str(RESULTS / "latest.png"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    print(
        f"chart: {RESULTS / 'latest.png'}"
        if out.returncode == 0
        else f"chart failed: {out.stderr[-500:]}"
    )
