"""``GET /healthz`` on the host's own port: no token, a small JSON body, and the
browser defences of every other request still in front of it."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from ahpcore import __version__
from tests.test_cli import Served, start_serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    running = start_serve(tmp_path_factory.mktemp("healthz"))
    try:
        yield running
    finally:
        running.process.terminate()
        running.process.communicate(timeout=30)


def _body(
    served: Served, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    address = urlsplit(served.url)
    assert address.hostname is not None and address.port is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_healthz_answers_ok_and_the_version_without_a_token(served: Served) -> None:
    status, headers, body = _body(served, "/healthz")
    assert status == 200
    assert json.loads(body) == {"status": "ok", "version": __version__}
    assert headers["content-type"] == "application/json"
    assert headers["cache-control"] == "no-store"
    # Nothing a page elsewhere could read, and nothing more than the two words.
    assert "access-control-allow-origin" not in headers
    assert "server" not in headers


def test_healthz_ignores_a_query_and_any_token_offered(served: Served) -> None:
    status, _, body = _body(served, "/healthz?token=wrong-token-wrong-token")
    assert status == 200
    assert json.loads(body)["status"] == "ok"


def test_healthz_from_a_foreign_page_is_refused_like_everything_else(served: Served) -> None:
    status, headers, _ = _body(served, "/healthz", {"Origin": "https://evil.example"})
    assert status == 403
    assert "access-control-allow-origin" not in headers


def test_healthz_under_a_rebound_name_is_refused(served: Served) -> None:
    port = urlsplit(served.url).port
    status, _, _ = _body(served, "/healthz", {"Host": f"attacker.example:{port}"})
    assert status == 403


def test_other_paths_still_need_the_token(served: Served) -> None:
    assert _body(served, "/")[0] == 401
    assert _body(served, "/healthzz")[0] == 401
    assert _body(served, f"/?token={served.token}")[0] == 426
