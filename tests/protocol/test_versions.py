"""Version negotiation, case by case, as the initialize row describes it."""

import pytest

from ahpcore.protocol.errors import INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION, ProtocolError
from ahpcore.protocol.versions import SUPPORTED_VERSIONS, negotiate, parse_version


@pytest.mark.parametrize(
    ("offered", "answer"),
    [
        (["1.0.0"], "1.0.0"),
        (["0.9.0"], "0.9.0"),  # VS Code 1.140
        (["0.10.0"], "0.10.0"),  # VS Code 1.141
        (["0.9.0", "1.0.0"], "1.0.0"),  # highest spoken, whatever the order
        (["0.10.0", "0.9.0"], "0.10.0"),
        (["0.8.0", "0.9.0"], "0.9.0"),
        (["2.0.0", "1.0.0"], "1.0.0"),
    ],
)
def test_answers_the_highest_offered_version_it_speaks(offered, answer):
    assert negotiate(offered).protocol_version == answer


@pytest.mark.parametrize("offered", [["1.2.0"], ["1.0.7"], ["1.1.0", "0.3.0"]])
def test_a_newer_1x_client_connects_rather_than_being_refused(offered):
    negotiated = negotiate(offered)
    assert negotiated.protocol_version == offered[0]
    assert negotiated.served_as == "1.0.0"


def test_an_exact_match_wins_over_a_caret_compatible_newer_offer():
    assert negotiate(["1.3.0", "1.0.0"]).protocol_version == "1.0.0"


@pytest.mark.parametrize("offered", [["2.0.0"], ["0.8.0"], ["0.11.0"], []])
def test_refusal_lists_the_supported_versions(offered):
    with pytest.raises(ProtocolError) as caught:
        negotiate(offered)
    assert caught.value.code == UNSUPPORTED_PROTOCOL_VERSION
    assert caught.value.data == {"supportedVersions": ["1.0.0", "0.10.0", "0.9.0"]}
    assert list(SUPPORTED_VERSIONS) == ["1.0.0", "0.10.0", "0.9.0"]


@pytest.mark.parametrize("bad", ["1.0", "v1.0.0", "1.0.0-beta", "01.0.0", "", "1.0.0.0", 1, None])
def test_an_entry_that_is_not_semver_is_invalid_params_naming_it(bad):
    with pytest.raises(ProtocolError) as caught:
        negotiate(["1.0.0", bad])
    assert caught.value.code == INVALID_PARAMS
    assert repr(bad) in caught.value.message
    assert "protocolVersions[1]" in caught.value.message


def test_parse_version():
    assert parse_version("0.10.0") == (0, 10, 0)
    assert parse_version("0.10.0") > parse_version("0.9.0")
