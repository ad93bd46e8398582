"""The window's diagnostics screen: what the host reaches, and whether it reaches it.

``diagnosticsFetch`` fetches only the endpoints ``getNetworkDiagnosticsInfo``
names (``Endpoint``), compared as whole URLs: a client cannot make the daemon
fetch anything else. Redirects are not followed, the body is cut short and
every step has a timeout.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import anyio
import anyio.to_thread

from ahpcore.protocol.errors import INVALID_PARAMS, PERMISSION_DENIED, ProtocolError

#: Each step (a DNS lookup, the HTTP exchange) gives up after this long.
FETCH_TIMEOUT = 10.0
#: At most this much of a body comes back: enough to show what answered.
BODY_BYTES = 4096
#: The environment variables that choose a proxy, in either case.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str
    expected_status: int = 200
    expected_content: str | None = None

    def wire(self) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "url": self.url}
        found["expectedStatus"] = self.expected_status
        if self.expected_content is not None:
            found["expectedContent"] = self.expected_content
        return found


#: What this host's agents and tools talk to. Anthropic answers 401 to a request
#: with no key, which is all a reachability check needs to see.
DEFAULT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GitHub API", "https://api.github.com/"),
    Endpoint("Anthropic API", "https://api.anthropic.com/v1/models", expected_status=401),
    Endpoint("Python Package Index", "https://pypi.org/simple/"),
)


def _without_password(value: str) -> str:
    """A proxy URL with any credentials in it blanked: the screen may be shared."""
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return value
    if parts.username is None and parts.password is None:
        return value
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"[redacted]@{host}"))


def proxy_env() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in PROXY_VARIABLES:
        for spelling in (name, name.lower()):
            value = os.environ.get(spelling)
            if value:
                found[spelling] = _without_password(value)
    return found


def _version() -> str:
    try:
        return metadata.version("ahpcore")
    except metadata.PackageNotFoundError:
        return "unknown"


def network_info(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    return {
        "version": _version(),
        "os": sys.platform,
        "arch": platform.machine(),
        # The window's http.* settings never reach this host: it uses the environment.
        "proxySettings": {},
        "proxyEnv": proxy_env(),
        "endpoints": [endpoint.wire() for endpoint in endpoints],
    }


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the answer is the redirect itself, never where it points


async def _resolve(host: str, family: socket.AddressFamily) -> dict[str, Any]:
    started = time.monotonic()
    found: dict[str, Any] = {}
    try:
        with anyio.fail_after(FETCH_TIMEOUT):
            answers = await anyio.getaddrinfo(host, None, family=family, type=socket.SOCK_STREAM)
        found["address"] = str(answers[0][4][0])
    except TimeoutError:
        found["error"] = f"no answer in {FETCH_TIMEOUT:.0f} s"
    except OSError as exc:
        found["error"] = str(exc) or type(exc).__name__
    found["durationMs"] = round((time.monotonic() - started) * 1000)
    return found


def _probe(url: str) -> dict[str, Any]:
    opener = urllib.request.build_opener(_NoRedirects)
    request = urllib.request.Request(url, headers={"User-Agent": f"ahp/{_version()}"})
    try:
        with opener.open(request, timeout=FETCH_TIMEOUT) as answer:
            status, reason, body = answer.status, answer.reason, answer.read(BODY_BYTES)
    except urllib.error.HTTPError as exc:
        status, reason, body = exc.code, str(exc.reason), exc.read(BODY_BYTES)
    return {
        "statusCode": status,
        "statusMessage": reason,
        "body": body.decode("utf-8", "replace"),
    }


def _proxy_for(url: str, host: str) -> str | None:
    scheme = urllib.parse.urlsplit(url).scheme
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if proxy is None or urllib.request.proxy_bypass(host):
        return None
    return _without_password(proxy)


async def fetch(url: Any, endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    method = "diagnosticsFetch"
    if not isinstance(url, str) or not url:
        raise ProtocolError(INVALID_PARAMS, f"{method}: params.url must be a URL")
    allowed = [endpoint.url for endpoint in endpoints]
    if url not in allowed:
        raise ProtocolError(
            PERMISSION_DENIED,
            f"{method}: {url} is not an endpoint this host checks; it fetches only "
            + ", ".join(allowed),
        )
    host = urllib.parse.urlsplit(url).hostname or ""
    result: dict[str, Any] = {"url": url}
    proxy = _proxy_for(url, host)
    if proxy is not None:
        result["proxyUrl"] = proxy
    result["dnsIpv4"] = await _resolve(host, socket.AF_INET)
    result["dnsIpv6"] = await _resolve(host, socket.AF_INET6)
    started = time.monotonic()
    try:
        # urllib's own timeout bounds each socket step; this bounds the whole.
        with anyio.fail_after(FETCH_TIMEOUT * 2):
            result.update(await anyio.to_thread.run_sync(_probe, url, abandon_on_cancel=True))
    except TimeoutError:
        result["error"] = f"no answer in {FETCH_TIMEOUT * 2:.0f} s"
    except (OSError, ValueError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", None) or exc
        result["error"] = str(reason) or type(exc).__name__
    result["durationMs"] = round((time.monotonic() - started) * 1000)
    return result
