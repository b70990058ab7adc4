"""The SLA report (protocol §11 `report`): the attempt log summed up per provider. Pure.

For each provider: requests that reached it, failures among them, failovers (failures that
passed the request on to another provider), skips (the request passed it by without sending
anything: open circuit, failed health check, used-up budget, unset key), success rate,
p50/p95/p99 latency of its successful answers against its declared `latency_p95_ms` (a p95
above it is a breach), and its budgets' use. Over time: success rate and p95 per bucket, over
the part of the period that has data, drawn as inline SVG by `html` (one self-contained file:
no scripts or styles from elsewhere).
"""

from __future__ import annotations

import html as _html
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..state import LoggedAttempt


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


@dataclass
class ProviderReport:
    name: str
    requests: int = 0  # attempts sent to it
    ok: int = 0
    failures: int = 0  # attempts sent to it that failed
    failovers: int = 0  # failures after which another provider got the request
    skips: int = 0  # requests that passed it by without sending it anything
    success_rate: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    declared_p95_ms: float | None = None
    breach: bool = False
    skipped: dict[str, int] = field(default_factory=dict)  # skips by reason
    reasons: dict[str, int] = field(default_factory=dict)  # outcomes of the attempts sent
    quota: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    since: float
    until: float
    requests: int
    answered: int
    providers: list[ProviderReport]
    series: dict[str, list[dict[str, Any]]]  # provider -> buckets (t, success_rate, p95_ms)
    chart_since: float  # the span the series covers: the part of the period with data
    chart_until: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build(
    attempts: Iterable[LoggedAttempt],
    *,
    since: float,
    until: float,
    providers: list[str],
    declared: dict[str, float],
    quota: dict[str, list[dict[str, Any]]],
    buckets: int = 24,
) -> Report:
    """Sum the log up. `providers` fixes the order (and lists providers with no traffic)."""
    log = sorted(attempts, key=lambda a: a.ts)
    rows = {name: ProviderReport(name) for name in providers}
    latencies: dict[str, list[float]] = defaultdict(list)
    by_request: dict[str, list[LoggedAttempt]] = defaultdict(list)
    for a in log:
        row = rows.setdefault(a.provider, ProviderReport(a.provider))
        by_request[a.request].append(a)
        if not a.sent:
            row.skips += 1
            row.skipped[a.reason] = row.skipped.get(a.reason, 0) + 1
            continue
        row.requests += 1
        row.reasons[a.reason] = row.reasons.get(a.reason, 0) + 1
        if a.reason == "ok":
            row.ok += 1
            latencies[a.provider].append(a.ms)
        else:
            row.failures += 1
    for trace in by_request.values():
        for prev, nxt in itertools.pairwise(trace):
            if prev.sent and prev.reason != "ok" and prev.provider != nxt.provider:
                rows[prev.provider].failovers += 1
    for name, row in rows.items():
        if row.requests:
            row.success_rate = round(row.ok / row.requests, 4)
        ms = latencies[name]
        row.p50_ms, row.p95_ms, row.p99_ms = (percentile(ms, q) for q in (0.5, 0.95, 0.99))
        row.declared_p95_ms = declared.get(name)
        row.breach = bool(row.declared_p95_ms and row.p95_ms and row.p95_ms > row.declared_p95_ms)
        row.quota = quota.get(name, [])
    answered = sum(any(a.reason == "ok" for a in t) for t in by_request.values())
    # The charts cover the part of the period that has data, so that a busy minute in a quiet
    # day still shows its shape instead of a dot at the edge of a 24 h axis.
    first, last = since, until
    if log:
        first = max(since, log[0].ts)
        last = max(min(until, log[-1].ts), first + 1.0)
    return Report(
        since,
        until,
        len(by_request),
        answered,
        list(rows.values()),
        _series(log, first, last, buckets),
        first,
        last,
    )


def _series(
    log: list[LoggedAttempt], since: float, until: float, buckets: int
) -> dict[str, list[dict[str, Any]]]:
    """Success rate and p95 per provider in `buckets` equal buckets from `since` to `until`."""
    width = (until - since) / buckets
    cells: dict[str, dict[int, list[LoggedAttempt]]] = defaultdict(lambda: defaultdict(list))
    for a in log:
        if a.sent:
            cells[a.provider][max(0, min(buckets - 1, int((a.ts - since) // width)))].append(a)
    series: dict[str, list[dict[str, Any]]] = {}
    for name, by_bucket in cells.items():
        points = []
        for i in sorted(by_bucket):
            got = by_bucket[i]
            ok = [a.ms for a in got if a.reason == "ok"]
            points.append(
                {
                    "t": since + (i + 0.5) * width,
                    "success_rate": round(len(ok) / len(got), 4),
                    "p95_ms": percentile(ok, 0.95),
                }
            )
        series[name] = points
    return series


# ---------------------------------------------------------------------------------------------
# HTML

_PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
_W, _H, _PAD = 720, 240, 40


def _stamp(ts: float, span: float = 86400.0) -> str:
    """A time for an axis or a heading: with seconds when the span is under an hour."""
    fmt = "%Y-%m-%d %H:%M:%S UTC" if span < 3600 else "%Y-%m-%d %H:%M UTC"
    return datetime.fromtimestamp(ts, UTC).strftime(fmt)


def _colors(report: Report) -> dict[str, str]:
    return {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(sorted(report.series))}


def _chart(title: str, report: Report, key: str, top: float | None, unit: str) -> str:
    values = [p[key] for pts in report.series.values() for p in pts if p[key] is not None]
    ymax = top if top is not None else max(values or [1.0]) * 1.1 or 1.0
    since, span = report.chart_since, max(report.chart_until - report.chart_since, 1e-3)

    def xy(p: dict[str, Any]) -> str:
        x = _PAD + (p["t"] - since) / span * (_W - 2 * _PAD)
        y = _H - _PAD - (p[key] / ymax) * (_H - 2 * _PAD)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img">',
        f"<title>{_html.escape(title)}</title>",
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#999"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#999"/>',
        f'<text x="{_PAD}" y="{_PAD - 8}" font-size="12">{ymax:.4g}{unit}</text>',
        f'<text x="{_PAD}" y="{_H - 12}" font-size="11">{_stamp(since, span)}</text>',
        f'<text x="{_W - _PAD}" y="{_H - 12}" font-size="11" text-anchor="end">'
        f"{_stamp(report.chart_until, span)}</text>",
    ]
    colors = _colors(report)
    for name, points in sorted(report.series.items()):
        pts = [p for p in points if p[key] is not None]
        if not pts:
            continue
        coords = " ".join(xy(p) for p in pts)
        parts.append(
            f'<polyline class="series" data-provider="{_html.escape(name)}" points="{coords}" '
            f'fill="none" stroke="{colors[name]}" stroke-width="2"/>'
        )
        parts += [
            f'<circle cx="{c.split(",")[0]}" cy="{c.split(",")[1]}" r="3" fill="{colors[name]}"/>'
            for c in coords.split()
        ]
    parts.append("</svg>")
    return "".join(parts)


def _legend(report: Report) -> str:
    """The providers' colors, as HTML under the charts: it wraps instead of being cut."""
    items = "".join(
        f'<li><span class="swatch" style="background:{color}"></span>'
        f"<span>{_html.escape(name)}</span></li>"
        for name, color in _colors(report).items()
    )
    return f'<ul class="legend">{items}</ul>'


def cell(value: Any) -> str:
    """A table cell: the value, or a dash when there is none."""
    return "–" if value is None else str(value)


def html(report: Report) -> str:
    """A self-contained HTML page: the table and two charts."""
    rows = []
    for p in report.providers:
        rate = None if p.success_rate is None else f"{p.success_rate:.1%}"
        quota = "; ".join(f"{q['budget']}: {q['used']}/{q['limit']}" for q in p.quota) or "–"
        breach = ' class="breach"' if p.breach else ""
        rows.append(
            "<tr>"
            f"<td>{_html.escape(p.name)}</td><td>{p.requests}</td><td>{cell(rate)}</td>"
            f"<td>{p.failures}</td><td>{p.failovers}</td><td>{p.skips}</td>"
            f"<td>{cell(p.p50_ms)}</td><td{breach}>{cell(p.p95_ms)}</td><td>{cell(p.p99_ms)}</td>"
            f"<td>{cell(p.declared_p95_ms)}</td><td>{_html.escape(quota)}</td></tr>"
        )
    answered = f"{report.answered}/{report.requests}" if report.requests else "0"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agent-reach report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #111; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ddd; padding: .3rem .6rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
td.breach {{ background: #fee2e2; font-weight: bold; }}
ul.legend {{ list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; }}
ul.legend .swatch {{ display: inline-block; width: .8rem; height: .8rem; margin-right: .35rem; }}
</style></head>
<body>
<h1>agent-reach report</h1>
<p>{_stamp(report.since)} to {_stamp(report.until)}: {answered} requests answered.</p>
<table>
<tr><th>provider</th><th>requests</th><th>success</th><th>failures</th><th>failovers</th>
<th>skips</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>declared p95</th><th>quota</th></tr>
{"".join(rows)}
</table>
<h2>Success rate</h2>
{_chart("success rate over time", report, "success_rate", 1.0, "")}
{_legend(report)}
<h2>p95 latency</h2>
{_chart("p95 latency over time (ms)", report, "p95_ms", None, " ms")}
{_legend(report)}
<script>
/* After layout, count the chart lines that were really drawn (for automated checks). */
window.addEventListener("load", function () {{
  var drawn = 0;
  document.querySelectorAll("polyline.series").forEach(function (line) {{
    var box = line.getBBox();
    if (box.width > 0 || box.height > 0) drawn++;
  }});
  document.body.setAttribute("data-drawn", String(drawn));
}});
</script>
</body></html>
"""
