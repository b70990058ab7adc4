"""The deployment examples under deploy/: the Grafana dashboard queries only metrics that a
running proxy exports, the Prometheus, Compose and fleet config files agree, and the Compose
proxies run the image `make image` builds."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent_reach.config import load_config
from agent_reach.version import __version__

from ..fakes.upstream import Upstream
from .test_proxy import MSG, start, stop

DEPLOY = Path(__file__).parents[2] / "deploy"
DASHBOARD = json.loads((DEPLOY / "grafana" / "agent-reach.json").read_text())


def exprs(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            found.append(var["query"]["query"])
    return found


def test_the_dashboard_is_import_ready() -> None:
    assert DASHBOARD["uid"] == "agent-reach"
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"] for p in DASHBOARD["panels"]).lower()
    for wanted in ("outcome", "failovers", "p50 / p95", "circuit", "quota"):
        assert wanted in titles
    for panel in DASHBOARD["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]


def test_every_metric_the_dashboard_queries_is_in_metrics(up: Upstream, tmp_path: Path) -> None:
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 60},
        "providers": [
            {"name": "dead", "endpoint": up.url("server")},
            {"name": "ok", "endpoint": up.url("ok"), "metadata": {"rate_limit": "100req/day"}},
        ],
    }
    proxy = start(config, tmp_path, up)
    try:
        client = proxy.client()
        for _ in range(3):
            client.chat.completions.create(model="m", messages=MSG)
        _, text = proxy.get("/metrics")
    finally:
        stop(proxy)
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    queried = {m for e in exprs(DASHBOARD) for m in re.findall(r"\bagent_reach_\w+", e)}
    assert len(queried) >= 8
    missing = queried - exported
    assert not missing, f"the dashboard queries metrics /metrics does not have: {missing}"


def test_prometheus_scrapes_every_proxy_of_the_compose_file() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    services = compose["services"]
    proxies = sorted(n for n in services if n.startswith("proxy-"))
    assert len(proxies) >= 2
    assert {"redis", "prometheus", "grafana"} <= set(services)
    fleet = load_config(DEPLOY / "config.yaml")
    assert fleet.state == "redis://redis:6379/0"
    (job,) = prometheus["scrape_configs"]
    targets = [t for c in job["static_configs"] for t in c["targets"]]
    assert targets == [f"{name}:{fleet.server.port}" for name in proxies]
    for name in proxies:
        assert "./config.yaml:/etc/agent-reach/config.yaml:ro" in services[name]["volumes"]
    grafana = services["grafana"]["volumes"]
    assert "./grafana/agent-reach.json:/var/lib/grafana/dashboards/agent-reach.json:ro" in grafana


def test_prometheus_and_grafana_are_on_loopback_and_scrape_with_a_key(tmp_path: Path) -> None:
    """Issue 47: nothing but the proxies is published beyond this machine, Grafana's password
    is the user's, and the scrape sends a client key (the proxies ask for one on /metrics)."""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"]), name
    grafana_env = services["grafana"]["environment"]
    assert grafana_env["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:-admin}"
    (job,) = prometheus["scrape_configs"]
    key_file = job["authorization"]["credentials_file"]
    # The entrypoint writes the first key there: run its first command under sh, as the image's
    # does, with compose's `$$` read as `$` and the file put under tmp_path.
    entry = services["prometheus"]["entrypoint"]
    assert entry[:2] == ["/bin/sh", "-c"]
    first = entry[2].split(" &&")[0].replace("$$", "$").replace(key_file, str(tmp_path / "k"))
    env = {"AGENT_REACH_API_KEYS": "sk-first,sk-second", "PATH": "/usr/bin:/bin"}
    subprocess.run(["/bin/sh", "-c", first], env=env, check=True)
    assert (tmp_path / "k").read_text() == "sk-first"
    assert "--config.file=/etc/prometheus/prometheus.yml" in entry[2]


def test_the_compose_proxies_run_the_image_make_image_builds() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    build = (DEPLOY / "image" / "build.py").read_text()
    assert 'NAME = "agent-reach"' in build  # the image is localhost/agent-reach:VERSION
    for name, service in compose["services"].items():
        if not name.startswith("proxy-"):
            continue
        # the version of this tree by default (the compose file names it: bump both)
        assert service["image"] == f"localhost/agent-reach:${{AGENT_REACH_VERSION:-{__version__}}}"
        assert service["pull_policy"] == "never"
        assert "command" not in service or "pip" not in " ".join(service["command"])
        assert "working_dir" not in service  # no source tree mounted
        assert service["read_only"] is True
        args = service["command"]
        timeout = float(args[args.index("--shutdown-timeout") + 1])
        assert float(service["stop_grace_period"].rstrip("s")) > timeout
        assert "AGENT_REACH_API_KEYS" in service["environment"]
