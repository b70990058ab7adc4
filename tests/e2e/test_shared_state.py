"""Shared state across processes: proxies on one Redis, CLI runs on one SQLite file, the
report and status views, and a Redis that dies mid-run."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ..fakes.upstream import Upstream
from ..png import read_png
from ..services import RedisServer, chromium_flags
from .test_cli import config_file, p, run
from .test_proxy import MSG, Proxy, start, stop


def proxy_config(upstream: Upstream, state: str) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": state,
        "circuit": {"failures": 2, "cooldown_s": 120},
        "defaults": {"retries": 0},
        "providers": [
            {"name": "flaky", "endpoint": upstream.url("server")},
            {
                "name": "free",
                "endpoint": upstream.url("ok"),
                "metadata": {"rate_limit": "6req/day"},
            },
            {"name": "backup", "endpoint": upstream.url("backup")},
        ],
    }


def via(proxy: Proxy, *order: str) -> tuple[str, str]:
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, extra_headers={"X-Agent-Reach-Fallback-Order": ",".join(order)}
    )
    return raw.headers["X-Agent-Reach-Provider"], raw.headers["X-Agent-Reach-Trace"]


def test_two_proxies_share_circuit_and_quota_on_redis(
    upstream: Upstream, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start(proxy_config(upstream, redis_url), tmp_path / "a", upstream)
    b = start(proxy_config(upstream, redis_url), tmp_path / "b", upstream)
    try:
        for _ in range(2):  # two failures open flaky's circuit, through A only
            assert via(a, "flaky", "backup")[0] == "backup"
        for _ in range(3):
            assert via(a, "free")[0] == "free"
            assert via(b, "free")[0] == "free"
        time.sleep(2.0)  # writes go out every 0.5 s; each instance re-reads every second
        _, trace = via(b, "flaky", "backup")
        assert trace.startswith("flaky:circuit_open:0,backup:ok:")
        _, trace = via(b, "free", "backup")  # 6 of 6 used, 3 through each instance
        assert trace.startswith("free:quota_exhausted:0,backup:ok:")
        for proxy in (a, b):
            _, body = proxy.get("/agent-reach/v1/status")
            rows = {r["provider"]: r for r in body["providers"]}
            assert rows["flaky"]["circuit"]["state"] == "open"
            assert rows["free"]["quota"][0]["used"] == 6
    finally:
        stop(a)
        stop(b)


def test_redis_killed_mid_run_keeps_serving(
    upstream: Upstream, redis_server: RedisServer, redis_url: str, tmp_path: Path
) -> None:
    proxy = start(proxy_config(upstream, redis_url), tmp_path, upstream)
    try:
        assert via(proxy, "free")[0] == "free"
        redis_server.kill()
        answers = [via(proxy, "flaky", "backup")[0] for _ in range(10)]
        assert answers == ["backup"] * 10
        start_t = time.perf_counter()
        assert via(proxy, "backup")[0] == "backup"
        assert time.perf_counter() - start_t < 1  # no waiting on the dead store
    finally:
        stop(proxy)
        redis_server.start()
    log = (tmp_path / "proxy.log").read_text()
    assert log.count("is down") == 1
    assert "routing on in-memory state" in log


def test_two_cli_processes_share_quota_and_circuits_on_sqlite(
    upstream: Upstream, tmp_path: Path
) -> None:
    cfg = config_file(
        tmp_path,
        p("free", upstream.url("ok"), metadata={"rate_limit": "3req/day", "latency_p95_ms": 1}),
        p("backup", upstream.url("backup")),
    )
    results: list[subprocess.CompletedProcess[str]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(run("chat", "--json", "-p", "hi", config=cfg))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [json.loads(r.stdout)["provider"] for r in results] == ["free"] * 3
    fourth = json.loads(run("chat", "--json", "-p", "hi", config=cfg).stdout)
    assert [a["reason"] for a in fourth["trace"]] == ["quota_exhausted", "ok"]
    status = json.loads(run("status", "--json", config=cfg).stdout)
    assert {r["provider"]: r["quota"][0]["used"] for r in status if r["quota"]} == {"free": 3}


def test_report_and_status_from_the_attempt_log(upstream: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("flaky", upstream.url("server"), metadata={"latency_p95_ms": 5000}),
        p("ok", upstream.url("ok"), metadata={"latency_p95_ms": 0.001}),  # any p95 breaches
        circuit={"failures": 3, "cooldown_s": 300},
    )
    for _ in range(4):
        assert run("chat", "-p", "hi", config=cfg).returncode == 0
    report = json.loads(run("report", "--json", "--since", "1h", config=cfg).stdout)
    rows = {r["name"]: r for r in report["providers"]}
    assert (report["requests"], report["answered"]) == (4, 4)
    assert rows["flaky"]["requests"] == 3  # the 4th request skipped it: its circuit opened
    assert rows["flaky"]["skipped"] == {"circuit_open": 1}
    assert rows["flaky"]["success_rate"] == 0.0
    assert (rows["flaky"]["failures"], rows["flaky"]["failovers"]) == (3, 3)
    assert rows["flaky"]["skips"] == 1  # a skip is not a failover
    assert (rows["ok"]["requests"], rows["ok"]["success_rate"]) == (4, 1.0)
    assert rows["ok"]["breach"] is True
    assert rows["ok"]["p50_ms"] > 0
    table = run("report", config=cfg)
    assert "flaky" in table.stdout
    assert "breach" in table.stdout
    only = json.loads(run("report", "--json", "--provider", "ok", config=cfg).stdout)
    assert [r["name"] for r in only["providers"]] == ["ok"]
    status = json.loads(run("status", "--json", config=cfg).stdout)
    circuits = {r["provider"]: r["circuit"] for r in status}
    assert circuits["flaky"]["state"] == "open"
    assert circuits["flaky"]["cause"] == "server_error"
    assert circuits["ok"]["state"] == "closed"
    assert run("report", "--since", "forever", config=cfg).returncode == 2


LONG = "provider-with-a-name-long-enough-to-be-cut-by-a-narrow-legend"

# Injected into a copy of the page: after layout, is every provider name fully inside the box
# that shows it, and where is the first chart?
_MEASURE = """<script>
window.addEventListener("load", function () {
  var names = %s, found = 0, clipped = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.children.length || names.indexOf(el.textContent.trim()) < 0) return;
    found++;
    var box = el.getBoundingClientRect();
    var frame = (el.closest("svg") || document.documentElement).getBoundingClientRect();
    var right = Math.min(frame.right, document.documentElement.clientWidth);
    if (box.left < frame.left || box.right > right + 0.5 || box.width === 0) {
      clipped.push(el.textContent.trim());
    }
  });
  var chart = document.querySelector("svg.chart").getBoundingClientRect();
  document.body.setAttribute("data-found", String(found));
  document.body.setAttribute("data-clipped", JSON.stringify(clipped));
  document.body.setAttribute("data-chart", [chart.left, chart.top, chart.width, chart.height]
    .map(Math.round).join(","));
});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> str:
    command = [*chromium_flags(tmp_path, 3000), "--hide-scrollbars", "--window-size=1000,1000"]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def _attr(dom: str, name: str) -> str:
    return dom.split(f'{name}="', 1)[1].split('"', 1)[0].replace("&quot;", '"')


@pytest.mark.browser
def test_report_html_renders_its_charts_in_chromium(upstream: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p(LONG, upstream.url("flaky")), p("ok", upstream.url("ok")))
    for _ in range(8):
        run("chat", "-p", "hi", config=cfg)
        time.sleep(0.1)  # a few seconds of data in a 24 h report
    page = tmp_path / "report.html"
    result = run("report", "--since", "24h", "--html", str(page), config=cfg)
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org", "")  # self-contained: no CDN

    # the page's own script counts the chart lines that have a non-empty box after layout
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert int(_attr(dom, "data-drawn")) >= 2  # success rate and latency, one provider each

    # every provider name on the page is shown whole: the legend does not cut long names
    probe = tmp_path / "measured.html"
    names = json.dumps([LONG, "ok"])
    probe.write_text(text.replace("</body>", _MEASURE % names + "</body>"))
    measured = _chromium(tmp_path, "--dump-dom", probe.as_uri())
    assert json.loads(_attr(measured, "data-clipped")) == []
    assert int(_attr(measured, "data-found")) >= 2 * 2 + 2  # 2 legends and the table, each name

    # the screenshot: the first chart's points spread over its width instead of all sitting
    # at the right edge of a 24 h axis
    left, top, width, height = map(int, _attr(measured, "data-chart").split(","))
    shot = tmp_path / "report.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    rows = read_png(shot)
    colors = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in ("#2563eb", "#dc2626")}
    xs = [
        x
        for row in rows[top : top + height]
        for x, pixel in enumerate(row[left : left + width])
        if pixel[:3] in colors
    ]
    assert xs, "no series drawn in the screenshot"
    plot = width - 2 * 40  # the chart's axis, inside its padding
    assert (max(xs) - min(xs)) / plot > 0.6, (min(xs), max(xs), plot)
