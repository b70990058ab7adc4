"""What keeps web pages away from a proxy without client keys (protocol §14).

With client auth off (the usual local setup) any page a browser shows could otherwise spend
the user's credit (a cross-site `text/plain` or form POST needs no preflight) or, by DNS
rebinding (its own name resolving to 127.0.0.1), read answers, the status page and stored
responses. So while auth is off, `Browsers.refused` turns away a request that
  - names a `Host` other than a loopback name (`localhost`, `*.localhost`, 127.0.0.0/8, `::1`)
    or the address the proxy was told to serve on (403);
  - carries a foreign `Origin` (any other host, or `null`) or `Sec-Fetch-Site: cross-site`
    (403);
  - POSTs to an API path (`/v1/…`, `/v1beta/…`, `/agent-reach/v1/route`) without a JSON content
    type (415).
`/healthz` and `/readyz` are exempt from the `Host` rule (a probe or a load balancer's check
reads nothing).
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

from ..core.errors import quoted
from .http11.wire import Request

_ANY = frozenset({"", "0.0.0.0", "::"})  # listening on every address names no host
PROBES = frozenset({"/healthz", "/readyz"})


def host_name(value: str) -> str:
    """The host of a `Host` header value (`name:port`, `[v6]:port`), lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


@functools.lru_cache(maxsize=64)  # every request of a keyless proxy asks, mostly of one host
def loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Browsers:
    """The rules above, for a proxy serving on `hosts` (the configured and the bound one)."""

    def __init__(self, hosts: tuple[str | None, ...]) -> None:
        self.hosts = frozenset(host_name(h) for h in hosts if h) - _ANY

    def allowed(self, host: str) -> bool:
        return loopback(host) or host in self.hosts

    def refused(self, request: Request) -> tuple[int, str] | None:
        """(status, why) for a request a web page may have made; None for the rest."""
        headers = request.headers
        host = host_name(headers.get("Host", ""))
        if request.path not in PROBES and not self.allowed(host):
            return 403, f"Host {quoted(host, 100)} is not served without client keys"
        origin = headers.get("Origin")
        if origin is not None and not self.allowed(_origin_host(origin)):
            return 403, f"cross-site request (Origin {quoted(origin, 100)}) refused"
        if headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            return 403, "cross-site request (Sec-Fetch-Site: cross-site) refused"
        if request.method == "POST" and _api(request.path) and not _json(request.content_type):
            return 415, "an API request must be sent as Content-Type: application/json"
        return None


def _origin_host(origin: str) -> str:
    try:
        return (urlsplit(origin.strip()).hostname or "").lower()
    except ValueError:
        return ""


def _api(path: str) -> bool:
    return path.startswith(("/v1/", "/v1beta/")) or path == "/agent-reach/v1/route"


def _json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")
