"""Strings a client chooses reach the log escaped: one event, one line."""

from __future__ import annotations

import logging
import sys

import pytest

from ahpcore.logs import LogHygiene, RedactingFormatter
from ahpcore.protocol.uris import ROOT_CHANNEL

pytestmark = pytest.mark.anyio


async def test_client_chosen_strings_cannot_start_a_log_line(ahp_host, caplog):
    caplog.set_level(logging.INFO)
    async with ahp_host(no_plugins=True) as running:
        client = await running.connect("id\nFORGED line one", conformance=False)
        await client.initialize()
        await client.dispatch(ROOT_CHANNEL, {"type": "root/x\nFORGED line two"})
        await client.notify("unsubscribe\nFORGED line three", {"channel": 1})
        await client.notify("unsubscribe", {"channel": 1, "_meta": "\nFORGED"})
        await client.sync()
    messages = [record.getMessage() for record in caplog.records]
    assert any("id\\nFORGED line one" in message for message in messages)
    assert any("root/x\\nFORGED line two" in message for message in messages)
    for message in messages:
        assert "\nFORGED" not in message, message


def test_the_handler_filter_redacts_tokens_and_escapes_every_message():
    record = logging.LogRecord(
        "websockets.server", logging.DEBUG, __file__, 1, "< GET %s HTTP/1.1\n%s", None, None
    )
    record.args = ("/?token=s3cret-value&x=1", "Authorization: Bearer abc.def\x1b[31m")
    assert LogHygiene().filter(record)
    assert record.getMessage() == (
        "< GET /?token=[redacted]&x=1 HTTP/1.1\\nAuthorization: Bearer [redacted]"
    )


def test_a_traceback_is_redacted_too():
    try:
        raise ValueError("bad request /?token=s3cret-value")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = RedactingFormatter("%(message)s").format(record)
    assert "s3cret-value" not in line and "token=[redacted]" in line
    assert "Traceback" in line  # its lines kept as they are


def test_the_tkn_spelling_is_redacted_as_well():
    from ahpcore.logs import redact

    assert redact("GET /?tkn=s3cret-value&x=1") == "GET /?tkn=[redacted]&x=1"
