"""Which HTTP proxy a provider's requests go through (protocol §2.3 `proxy`). Pure: no I/O.

Theory of operation. The environment's proxy variables are read once, when the providers are
prepared (`ProxyEnv.of`); `choose` then decides, for one URL, given the provider's `proxy:`
setting and the credentials of its `proxy_auth_env`, the `Proxy` to go through, or None for a
direct connection. The client only carries the decision out: a CONNECT tunnel to an https
upstream, an absolute-form request for an http one, `Proxy.authorization` as the proxy's
`Proxy-Authorization`.

The rules are curl's:
- the provider's `proxy: http://host:port` wins over every variable (`NO_PROXY` included);
  `proxy: none` (or `""`, as curl's `--proxy ""`) connects directly whatever they say;
- unset, an `https://` URL takes `https_proxy`, else `HTTPS_PROXY`, else `all_proxy` /
  `ALL_PROXY`; an `http://` URL takes `http_proxy` (lowercase only: a CGI server sets
  `HTTP_PROXY` from a request's `Proxy:` header), else `all_proxy` / `ALL_PROXY`. The first
  variable set decides; set but empty: no proxy;
- `no_proxy`, else `NO_PROXY`: comma-separated entries, each `*` (every host), a domain that
  matches itself and its subdomains (`example.com`, `.example.com` and `*.example.com` alike),
  an IP address or a CIDR network (`10.0.0.0/8`, `::1`, `[::1]`), any of them with `:port` to
  match that port only;
- a proxy is written `[http://][user[:password]@]host[:port]`: no scheme means http, no port
  1080 (curl's), user and password percent-decoded. Only http proxies are spoken (no socks,
  no TLS to the proxy itself).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

NONE = "none"  # `proxy: none`: direct, whatever the environment says
DEFAULT_PORT = 1080  # curl's, for a proxy written without a port

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HTTPS = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_HTTP = ("http_proxy", "all_proxy", "ALL_PROXY")
_NO_PROXY = ("no_proxy", "NO_PROXY")
VARIABLES = (*_HTTPS, "http_proxy", *_NO_PROXY)  # every variable read, once each


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy to go through: where, with which credentials, and where it was set (the
    provider's `proxy` field or an environment variable's name). Its repr and `shown` hold
    no credentials."""

    host: str
    port: int
    user: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    source: str = "proxy"

    @property
    def shown(self) -> str:
        """`host:port`, as details and logs name it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def named(self) -> str:
        """`proxy host:port`, and the variable that set it, for a failure's detail."""
        where = "" if self.source == "proxy" else f" from {self.source}"
        return f"proxy {self.shown}{where}"

    @property
    def url(self) -> str:
        """`http://host:port`, without credentials."""
        return f"http://{self.shown}"

    @property
    def authorization(self) -> str | None:
        """The `Proxy-Authorization` value (Basic), or None without credentials."""
        if not self.user and not self.password:
            return None
        return f"Basic {self._token}"

    @property
    def _token(self) -> str:
        return base64.b64encode(f"{self.user}:{self.password}".encode()).decode("ascii")

    @property
    def secrets(self) -> tuple[str, ...]:
        """What of its credentials must never be shown: the password, `user:password`, and
        their base64 form (an upstream that echoes its `Proxy-Authorization` shows that)."""
        if not self.user and not self.password:
            return ()
        return (self.password, f"{self.user}:{self.password}", self._token)


def is_direct(setting: str) -> bool:
    """Whether a `proxy:` setting says to connect directly: `none`, or empty (as curl's
    `--proxy ""`)."""
    return setting.strip().lower() in ("", NONE)


def parse(value: str, source: str = "proxy") -> Proxy:
    """A proxy as written (`[http://][user[:password]@]host[:port]`); ValueError, never
    quoting its credentials, when it is not an http proxy."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    shown = redacted(value.strip())
    if parts.scheme.lower() != "http":
        raise ValueError(
            f"{parts.scheme}:// proxies are not supported, only http://host:port (got {shown})"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"expected http://host:port with no path (got {shown})")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError(f"expected http://host:port, with a port number (got {shown})") from None
    if not host:
        raise ValueError(f"expected http://host:port (got {shown})")
    return Proxy(
        host,
        port or DEFAULT_PORT,
        unquote(parts.username or ""),
        unquote(parts.password or ""),
        source,
    )


def redacted(value: str) -> str:
    """A proxy as written, its credentials (`user:password@`) as `***@`."""
    scheme, sep, rest = value.rpartition("://")
    if "@" not in rest:
        return value
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}"


def with_auth(proxy: Proxy, auth: str | None) -> Proxy:
    """`proxy` with the credentials of a `proxy_auth_env` value (`user:password`) in place of
    its own; as it is when `auth` is None or empty."""
    if not auth:
        return proxy
    user, _, password = auth.partition(":")
    return Proxy(proxy.host, proxy.port, user, password, proxy.source)


@dataclass(frozen=True, slots=True)
class Bypass:
    """What `NO_PROXY` sends directly: every host, or hosts by domain or network (each with
    the port it is limited to, or None for any)."""

    everything: bool = False
    domains: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[Network, int | None], ...] = ()

    @classmethod
    def of(cls, value: str) -> Bypass:
        """The entries of a `NO_PROXY` value (an entry it cannot read matches nothing)."""
        domains: list[tuple[str, int | None]] = []
        networks: list[tuple[Network, int | None]] = []
        for raw in value.split(","):
            entry = raw.strip().lower()
            if entry == "*":
                return cls(everything=True)
            host, port = _entry(entry)
            if not host:
                continue
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                domains.append((host.removeprefix("*.").lstrip(".").rstrip("."), port))
        return cls(False, tuple(domains), tuple(networks))

    def matches(self, host: str, port: int) -> bool:
        """Whether a request to `host:port` goes directly."""
        if self.everything:
            return True
        name = host.strip("[]").lower().rstrip(".")
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return any(
                (name == d or name.endswith("." + d)) and p in (None, port)
                for d, p in self.domains
                if d
            )
        return any(address in net and p in (None, port) for net, p in self.networks)


def _entry(entry: str) -> tuple[str, int | None]:
    """(host, port) of one `NO_PROXY` entry: `[v6]:port`, `host:port`, a bare IPv6 address
    (several colons) or a host; a port that is not a number leaves the entry empty."""
    port = ""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host = entry
    if port and not port.isdigit():
        return "", None
    return host, int(port) if port else None


@dataclass(frozen=True, slots=True)
class ProxyEnv:
    """The environment's proxy variables, read once: (variable, value) for https and http
    URLs, None where none is set, and what `NO_PROXY` bypasses."""

    https: tuple[str, str] | None = None
    http: tuple[str, str] | None = None
    bypass: Bypass = Bypass()

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> ProxyEnv:
        """Read the variables of `environ` (curl's names and order)."""

        def first(*names: str) -> tuple[str, str] | None:
            return next(((n, environ[n]) for n in names if n in environ), None)

        no_proxy = first(*_NO_PROXY)
        return cls(first(*_HTTPS), first(*_HTTP), Bypass.of(no_proxy[1]) if no_proxy else Bypass())


def choose(url: str, setting: str | None, env: ProxyEnv, auth: str | None = None) -> Proxy | None:
    """The proxy a request to `url` goes through, or None (direct): the provider's `setting`
    (its `proxy` field: a proxy, `none`, or None to follow `env`), with the credentials of
    `auth` (its `proxy_auth_env`'s value) when given. ValueError when the variable that
    applies holds no http proxy (its name said)."""
    if setting is not None:
        return None if is_direct(setting) else with_auth(parse(setting), auth)
    parts = urlsplit(url)
    chosen = env.https if parts.scheme == "https" else env.http
    if chosen is None or not chosen[1].strip():
        return None
    host = parts.hostname or ""
    if env.bypass.matches(host, parts.port or (443 if parts.scheme == "https" else 80)):
        return None
    name, value = chosen
    try:
        proxy = parse(value, name)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}: {exc}") from None
    return with_auth(proxy, auth)
