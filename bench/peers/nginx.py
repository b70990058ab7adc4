"""nginx's configs and start: the upstream answering a fixed chat.completion (and failing on a
second port), and nginx as a peer, a plain reverse proxy routing by path prefix."""

from __future__ import annotations

import json
from pathlib import Path

from agent_reach.net.ports import free_port
from common import PATH, Processes, Target, wait_until_ok
from tests.fakes.bench import BODY as COMPLETION

from .base import ERROR_500, LOAD_CPU, UPSTREAM_KEY, tail

# -- upstreams ---------------------------------------------------------------------------------

MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]})


def nginx_frame(workdir: Path, log_level: str, servers: str) -> str:
    """An nginx config with one worker, its files under `workdir`, keep-alive clients and no
    access log, around `servers` (the upstream and server blocks)."""
    return f"""
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log {log_level};
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/nginx-body;
    proxy_temp_path {workdir}/nginx-proxy;
    fastcgi_temp_path {workdir}/nginx-fastcgi;
    uwsgi_temp_path {workdir}/nginx-uwsgi;
    scgi_temp_path {workdir}/nginx-scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    default_type application/json;
{servers}
}}
"""


def nginx_conf(port: int, failing: int, workdir: Path) -> str:
    """One worker answering fixed bodies from memory: the fastest upstream there is. On `port`
    the chat answer, and a 500 under /err500/; on `failing` a 500 on every path (for a proxy
    that sends every server of a group the same path: nginx)."""
    chat = COMPLETION.decode()
    return nginx_frame(
        workdir,
        "warn",
        f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /v1/chat/completions {{ return 200 '{chat}'; }}
        location = /v1/models {{ return 200 '{MODELS}'; }}
        location = /err500/v1/chat/completions {{ return 500 '{ERROR_500}'; }}
        location = /err500/v1/models {{ return 200 '{MODELS}'; }}
        location / {{ return 404 '{{"error": {{"message": "not found"}}}}'; }}
    }}
    server {{
        listen 127.0.0.1:{failing} backlog=4096;
        location / {{ return 500 '{ERROR_500}'; }}
    }}""",
    )


def nginx_proxy_conf(port: int, workdir: Path, env: dict[str, str], remember: bool) -> str:
    """nginx as a plain reverse proxy on `port`, one path prefix per scenario, keep-alive to the
    upstreams (as every proxy measured here keeps its upstream connections). Failover is an
    upstream group: the failing server first, the real one as `backup`. `remember`: nginx's
    defaults (max_fails=1 fail_timeout=10s: a failed server is left alone for 10 s, as
    agent-reach's circuit leaves a dead provider); else max_fails=0, every request pays. Errors
    are logged at `crit` only: agent-reach writes nothing per failed attempt either."""
    host = {
        k: env[f"BENCH_{k.upper()}"].removeprefix("http://")
        for k in ("upstream", "failing", "sse", "refused")
    }
    fails = "max_fails=1 fail_timeout=10s" if remember else "max_fails=0"
    # The SSE upstream's streams, unbuffered: paced (/stream); long at once, long one event at
    # a time, idle (bench/stream.py)
    sse = "\n".join(
        f"        location = /{prefix}{PATH} {{ proxy_pass http://sse/{path}{PATH}; "
        "proxy_buffering off; }"
        for prefix, path in (
            ("stream", "sse"),
            ("long", "long"),
            ("drip", "drip"),
            ("idle", "idle"),
        )
    )
    keep = "keepalive 16;"
    return nginx_frame(
        workdir,
        "crit",
        f"""
    upstream backup {{ server {host["upstream"]}; {keep} }}
    upstream sse {{ server {host["sse"]}; {keep} }}
    upstream refused {{ server {host["refused"]} {fails}; server {host["upstream"]} backup; {keep} }}
    upstream error500 {{ server {host["failing"]} {fails}; server {host["upstream"]} backup; {keep} }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Authorization "Bearer {UPSTREAM_KEY}";
        location = {PATH} {{ proxy_pass http://backup; }}
        location = /refused{PATH} {{ proxy_pass http://refused{PATH}; }}
        location = /error500{PATH} {{
            proxy_pass http://error500{PATH};
            proxy_next_upstream error timeout http_500 non_idempotent;
        }}
{sse}
    }}""",
    )


def nginx_command(nginx: str, conf: Path, workdir: Path) -> list[str]:
    return [nginx, "-c", str(conf), "-p", str(workdir), "-e", str(workdir / "nginx-error.log")]


def start_nginx(procs: Processes, nginx: str, workdir: Path, logs: Path) -> tuple[int, int]:
    """The upstream nginx on CPU 1: its chat port and its always-500 port."""
    port, failing = free_port(), free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(port, failing, workdir))
    log = logs / "upstream-nginx.log"
    procs.start(nginx_command(nginx, conf, workdir), cpu=LOAD_CPU, log=log)
    if wait_until_ok(Target(port), timeout_s=20) is None:
        raise SystemExit(f"nginx did not answer within 20 s: {tail(log)}")
    return port, failing
