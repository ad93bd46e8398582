"""Frames are read by orjson where it reads what the standard decoder reads; the rest
(what orjson refuses, or reads otherwise) is left to the standard decoder."""

from __future__ import annotations

import json

import pytest

from ahpcore.protocol.errors import PARSE_ERROR, ProtocolError
from ahpcore.rpc.framing import parse


@pytest.mark.parametrize(
    "number",
    [
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551616",
        "123456789012345678901234567890",
        "-0",
        "5e-324",
        "1.7976931348623157e308",
        "0.1",
    ],
)
def test_every_number_reads_as_the_standard_decoder_reads_it(number: str) -> None:
    # orjson reads an integer past 64 bits as a float: a client's id or clientSeq, or a
    # value relayed to every watcher, would change on the way through.
    text = f'{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"n":{number},"l":[{number}]}}}}'
    params = parse(text).params
    expected = json.loads(text)["params"]
    assert params == expected
    assert type(params["n"]) is type(expected["n"])
    assert type(params["l"][0]) is type(expected["l"][0])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":1e400}}', "out of range"),
        ('{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":NaN}}', "not a JSON number"),
        ('{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"\\ud800"}}', "surrogate"),
        ('\ufeff{"jsonrpc":"2.0","id":1,"method":"x"}', "BOM"),
        ('{"jsonrpc":"2.0","id":1,"method":"x",}', "not valid JSON"),
    ],
)
def test_what_orjson_refuses_is_refused_in_the_standard_words(text: str, said: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        parse(text)
    assert refused.value.code == PARSE_ERROR
    assert said in refused.value.message


def test_a_surrogate_pair_escaped_is_one_character() -> None:
    message = parse('{"jsonrpc":"2.0","method":"x","params":{"s":"\\ud83d\\ude00"}}')
    assert message.params == {"s": "\U0001f600"}
