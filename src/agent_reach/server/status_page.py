"""The live status page (protocol §12): `GET /agent-reach/` serves one self-contained HTML page
(`status.html`: no CDN, no build step) that redraws itself from `/agent-reach/v1/status`
every 2 s.

Client auth: when the proxy has client keys, a browser cannot send `Authorization: Bearer`,
so the page offers a small login form instead. `POST /agent-reach/login` with a valid key sets
the cookie `agent_reach_key` (HttpOnly, SameSite=Strict, path `/agent-reach/`), which then
authorizes the page and its status requests, and nothing else: the API paths still need the
header. The key never appears in a URL.
"""

from __future__ import annotations

import html
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .app import Proxy

PATH = "/agent-reach/"
LOGIN = "/agent-reach/login"
COOKIE = "agent_reach_key"
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


def by_cookie(request: web.Request) -> str | None:
    """The key a status-page cookie carries, for the page and its status requests only."""
    if request.method == "GET" and request.path.startswith(PATH):
        return request.cookies.get(COOKIE)
    return None


def login_form(problem: str = "", status: int = 401) -> web.Response:
    text = _FORM.format(
        problem=f'<p class="err">{html.escape(problem)}</p>' if problem else "", login=LOGIN
    )
    return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)


async def page(proxy: Proxy, request: web.Request) -> web.Response:
    """The page, or the login form when the proxy wants a key and the browser has none."""
    if proxy.api_keys and not proxy.authorized(request):
        return login_form()
    return web.Response(body=PAGE, content_type="text/html", headers=HEADERS)


async def login(proxy: Proxy, request: web.Request) -> web.Response:
    """Check the form's key; a valid one becomes the page's cookie."""
    try:
        form = await request.post()
    except (ValueError, LookupError, AssertionError):  # not UTF-8, a charset unknown, bad multipart
        return login_form("The form could not be read.", 400)
    key = form.get("key")
    if not isinstance(key, str) or not proxy.valid_key(key):
        return login_form("That key is not one of this proxy's client keys.")
    resp = web.Response(status=303, headers={"Location": PATH, **HEADERS})
    resp.set_cookie(COOKIE, key, path=PATH, httponly=True, samesite="Strict", secure=request.secure)
    return resp
