"""The inspector page: one HTML document, its style and script inlined when served.

The three files under ``static/`` ship in the wheel as they are written: no
build step, nothing fetched from elsewhere. Serving the page as one response
means one request, which the token gates like a WebSocket upgrade; the inlined
style and script are allowed by their hashes in the Content-Security-Policy,
so nothing else may run on the page, whatever a session title holds.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib import resources

_STYLE_MARK = "<!-- inspect.css -->"
_SCRIPT_MARK = "<!-- inspect.js -->"


def _static(name: str) -> str:
    return resources.files("ahpcore.inspector").joinpath("static", name).read_text("utf-8")


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


@functools.cache
def page() -> tuple[str, dict[str, str]]:
    """The document and the headers it is served with (read once per process)."""
    html, style, script = _static("inspect.html"), _static("inspect.css"), _static("inspect.js")
    if "</style" in style.lower() or "</script" in script.lower():
        raise ValueError("an inspector file would end its own element early")
    if html.count(_STYLE_MARK) != 1 or html.count(_SCRIPT_MARK) != 1:
        raise ValueError("inspect.html must mark where its style and script go, once each")
    document = html.replace(_STYLE_MARK, f"<style>{style}</style>").replace(
        _SCRIPT_MARK, f"<script>{script}</script>"
    )
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src '{_digest(script)}'",
            f"style-src '{_digest(style)}'",
            # The page's one connection: the WebSocket of the host that served it.
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": policy,
        "Cache-Control": "no-store",
        # The address holds the token: no other site may learn it as a referrer.
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
    }
    return document, headers
