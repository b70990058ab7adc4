"""The live status page (protocol §12): `GET /agent-reach/` serves one self-contained HTML page
(`status.html`: no CDN, no build step) that redraws itself from `/agent-reach/v1/status`
every 2 s.

Client auth: when the proxy has client keys, a browser cannot send `Authorization: Bearer`,
so the page offers a small login form instead. `POST /agent-reach/login` with a valid key sets
the cookie `agent_reach_key` (HttpOnly, SameSite=Strict, path `/agent-reach/`; Secure over TLS,
or behind a `server.trusted_proxies` hop that says `X-Forwarded-Proto: https`), a token derived
from the key (`cookie_of`) that authorizes the page and its status requests and nothing
else: the API paths still need the header. The key never appears in a URL or a cookie. A login
from another site's page (its `Origin`, or `Sec-Fetch-Site: cross-site`) is 403; more than
`LOGIN_TRIES` wrong keys a minute from one address are 429, said once in the log.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import time
from importlib import resources
from typing import TYPE_CHECKING, Protocol

from .browsers import host_name
from .http11.wire import Request, Response
from .log import server_log

if TYPE_CHECKING:
    from collections.abc import Sequence


class Site(Protocol):
    """What the page and its login need of the gateway: its client keys, and who may log in."""

    @property
    def api_keys(self) -> frozenset[str]: ...

    @property
    def logins(self) -> Logins: ...

    @property
    def trusted_proxies(self) -> Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]: ...

    def authorized(self, request: Request) -> bool: ...

    def valid_key(self, token: str) -> bool: ...


PATH = "/agent-reach/"
LOGIN = "/agent-reach/login"
COOKIE = "agent_reach_key"
LOGIN_TRIES = 10  # wrong keys a minute from one address before 429
PAGE = resources.files(__package__).joinpath("status.html").read_bytes()
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'",
    "X-Frame-Options": "DENY",
}
_FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>agent-reach status: log in</title>
<style>body{{font:14px system-ui,sans-serif;margin:48px}}input{{font:inherit;padding:4px}}
.err{{color:#cf222e}}</style></head><body>
<h1>agent-reach</h1><p>This proxy needs a client key to show its status.</p>{problem}
<form method="post" action="{login}"><label>Key <input type="password" name="key"
autocomplete="current-password" autofocus></label> <button type="submit">Log in</button></form>
</body></html>"""


def by_cookie(request: Request) -> str | None:
    """The key a status-page cookie carries, for the page and its status requests only."""
    if request.method == "GET" and request.path.startswith(PATH):
        return request.cookies.get(COOKIE)
    return None


def login_form(problem: str = "", status: int = 401) -> Response:
    text = _FORM.format(
        problem=f'<p class="err">{html.escape(problem)}</p>' if problem else "", login=LOGIN
    )
    return Response(text=text, status=status, content_type="text/html", headers=HEADERS)


async def page(site: Site, request: Request) -> Response:
    """The page, or the login form when the proxy wants a key and the browser has none."""
    if site.api_keys and not site.authorized(request):
        return login_form()
    return Response(body=PAGE, content_type="text/html", headers=HEADERS)


def cookie_of(key: str) -> str:
    """The page's cookie for a client key: derived from it (the cookie is no key), and
    revoked with it (a key gone from the config makes its cookie open nothing)."""
    return hashlib.blake2b(key.encode(), key=b"agent-reach status", digest_size=24).hexdigest()


class Logins:
    """Wrong keys sent to the login form, per address and minute."""

    def __init__(self) -> None:
        self.minute = 0
        self.wrong: dict[str, int] = {}

    def blocked(self, peer: str) -> bool:
        self._roll()
        return self.wrong.get(peer, 0) >= LOGIN_TRIES

    def failed(self, peer: str) -> None:
        self._roll()
        self.wrong[peer] = self.wrong.get(peer, 0) + 1
        if self.wrong[peer] == LOGIN_TRIES:
            server_log.warning(
                "status page: %d wrong keys from %s this minute; refusing its logins (429)",
                LOGIN_TRIES,
                peer,
            )

    def _roll(self) -> None:
        minute = int(time.monotonic() // 60)
        if minute != self.minute:
            self.minute, self.wrong = minute, {}


def _cross_site(request: Request) -> bool:
    origin = request.headers.get("Origin")
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        return True
    if origin is None:
        return False
    host = host_name(request.headers.get("Host", ""))
    return host_name(origin.partition("://")[2].split("/", 1)[0]) != host


def _secure(site: Site, request: Request) -> bool:
    """Whether the browser reached us over TLS: ours, or a trusted hop's that says so."""
    if request.secure:
        return True
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[-1].strip().lower()
    try:
        peer = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return False
    return proto == "https" and any(peer in net for net in site.trusted_proxies)


async def login(site: Site, request: Request) -> Response:
    """Check the form's key; a valid one makes the page's cookie."""
    if _cross_site(request):
        return login_form("Log in from this proxy's own page.", 403)
    peer = request.remote or "?"
    if site.logins.blocked(peer):
        refused = login_form("Too many wrong keys: wait a minute.", 429)
        refused.headers["Retry-After"] = "60"
        return refused
    try:
        form = await request.post()
    except (ValueError, LookupError, AssertionError):  # not UTF-8, a charset unknown, bad multipart
        return login_form("The form could not be read.", 400)
    key = form.get("key")
    if not isinstance(key, str) or not site.valid_key(key):
        site.logins.failed(peer)
        return login_form("That key is not one of this proxy's client keys.")
    resp = Response(status=303, headers={"Location": PATH, **HEADERS})
    secure = _secure(site, request)
    resp.set_cookie(
        COOKIE, cookie_of(key), path=PATH, httponly=True, samesite="Strict", secure=secure
    )
    return resp
