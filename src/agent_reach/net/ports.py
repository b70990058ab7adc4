"""A free TCP port: for `serve --workers`' one shared port, the demo's simulated providers, and
the tests' and benchmarks' servers."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now (connecting to it is refused at once)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
