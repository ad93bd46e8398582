"""The token is taken only as documented (``?token=``, ``?tkn=``, ``Authorization: Bearer``),
and no spelling of it reaches the log: a percent-encoded name is neither accepted nor logged."""

from __future__ import annotations

import io
import logging

import pytest

from ahpcore.logs import QUIET_LIBRARIES, configure, redact

pytestmark = pytest.mark.anyio
TOKEN = "the-right-token-Zq7xK2pW9"
#: Names a query parser that decodes before it compares would take for ``token``.
ENCODED_NAMES = ("tok%65n", "%74oken", "%74%6F%6B%65%6E", "to%6Ben", "t%6Bn", "tok%2565n")


@pytest.fixture
def host_log():
    """The host's own logging (``ahpcore.logs.configure``) at debug, into a string."""
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    stream = io.StringIO()
    configure("debug", stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


async def test_a_percent_encoded_token_name_is_refused(ahp_host):
    from tests.hardening.handshakes import handshake

    async with ahp_host(no_plugins=True, token=TOKEN) as running:
        for name in ENCODED_NAMES:
            status, _, _ = await handshake(f"{running.url}?{name}={TOKEN}")
            assert status == 401, name
        for query in (f"?token={TOKEN}", f"?tkn={TOKEN}", f"?x=1&token={TOKEN}"):
            status, _, _ = await handshake(running.url + query)
            assert status == 101, query
        status, _, _ = await handshake(running.url, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 101


async def test_no_spelling_of_the_token_reaches_the_log(ahp_host, host_log):
    from tests.hardening.handshakes import handshake

    async with ahp_host(no_plugins=True, token=TOKEN) as running:
        queries = [f"?{name}={TOKEN}" for name in (*ENCODED_NAMES, "token", "tkn", "TOKEN")]
        queries += [f"?token%3D{TOKEN}", f"?a=b&To%6Ben={TOKEN}&c=d"]
        for query in queries:
            await handshake(running.url + query)
        await handshake(running.url, {"Authorization": f"Bearer {TOKEN}"})
        await handshake(running.url, {"Authorization": f"bearer   {TOKEN}"})
    logged = host_log.getvalue()
    assert "GET /?" in logged  # the debug lines that carry the request were written
    assert TOKEN not in logged, [line for line in logged.splitlines() if TOKEN in line]


def test_redact_blanks_encoded_spellings():
    for name in ENCODED_NAMES:
        assert TOKEN not in redact(f"GET /?{name}={TOKEN} HTTP/1.1"), name
    assert redact("GET /?tok%65n%3Dabc&x=1") == "GET /?tok%65n%3D[redacted]&x=1"
    assert redact("Authorization: Bearer abc") == "Authorization: Bearer [redacted]"
