"""The chart of bench/peers's results: `python bench/chart.py latest.json latest.png`.

Run by bench/peers with the Python of bench/.peers/plot (a venv of its own holding matplotlib),
so that matplotlib is never a dependency of agent-reach. Log scales: the peers differ by
orders of magnitude; every bar carries its value.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {
    "direct": "#9e9e9e",
    "nginx": "#5d5d5d",
    "agent-reach": "#1b7f3b",
    "LiteLLM": "#c0392b",
    "Portkey": "#2c6fbb",
}
FLOOR = 1e-3  # log axes: a measured value at or below zero is drawn at this height


def get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def bars(
    ax: Any, title: str, unit: str, groups: dict[str, dict[str, float | None]], log: bool = True
) -> None:
    """Grouped bars: one group per label in `groups`, one bar per system inside each group."""
    systems = [s for s in COLORS if any(s in g for g in groups.values())]
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        for j, group in enumerate(groups.values()):
            value = group.get(system)
            if value is None:
                continue
            x = j + (i - (len(systems) - 1) / 2) * width
            height = max(value, FLOOR) if log else value
            ax.bar(x, height, width, color=COLORS[system], label=system if j == 0 else None)
            text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
            ax.annotate(text, (x, height), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    r = json.loads(src.read_text())
    peers = ["direct", *r.get("peers", [])]
    proxies = r.get("peers", [])
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    lat = r.get("latency_ms", {})
    bars(
        axes[0][0],
        "Added latency, 1 in flight",
        "ms over direct",
        {q: {p: get(lat, p, f"added_{q}") for p in proxies} for q in ("p50", "p99")},
    )
    bars(
        axes[0][1],
        "Throughput (wrk; direct = the upstream alone)",
        "requests/s",
        {
            f"{c} in flight": {p: get(r, "throughput", c, p, "rps") for p in peers}
            for c in ("32", "128")
        },
    )
    fo = r.get("failover", {})
    bars(
        axes[0][2],
        "Failover: added p50 vs backup alone",
        "ms",
        {
            label: {p: get(fo, p, s, "added_p50") for p in proxies}
            for s, label in (("refused", "primary refuses"), ("error500", "primary answers 500"))
        },
    )
    st = r.get("streaming", {})
    bars(
        axes[1][0],
        f"Streaming vs direct ({get(st, 'upstream')})",
        "ms added",
        {
            "TTFB p50": {p: get(st, p, "added_ttfb_p50") for p in proxies},
            "chunk gap p99": {p: get(st, p, "added_gap_p99") for p in proxies},
        },
    )
    rss = r.get("rss_mb", {})
    bars(
        axes[1][1],
        "Memory (RSS of the process tree)",
        "MB",
        {
            "idle": {p: get(rss, p, "idle") for p in proxies},
            "after all requests": {p: get(rss, p, "after") for p in proxies},
        },
        log=False,
    )
    bars(
        axes[1][2],
        "Cold start: spawn → first 200",
        "s",
        {"median": {p: get(r, "cold_start_s", p, "median") for p in proxies}},
        log=False,
    )
    handles, labels = axes[0][1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.96), ncol=len(labels))
    m = r.get("machine", {})
    fig.suptitle(
        f"agent-reach and its peers — {m.get('cpu')}, {m.get('cpus')} CPUs; "
        f"proxies pinned to one CPU; {r.get('when', '')}",
        fontsize=11,
        y=0.99,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
