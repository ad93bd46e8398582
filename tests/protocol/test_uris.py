"""Session URI aliases and default-chat URIs."""

import base64

import pytest

from ahpcore.protocol import uris

SID = "5f0c1d2e-0000-4000-8000-000000000001"


def test_a_provider_uri_and_its_alias_name_one_session():
    assert uris.same_session(f"claude:/{SID}", f"ahp-session:/{SID}")
    assert uris.session_id_of(f"claude:/{SID}") == SID
    assert uris.session_id_of(f"ahp-session:/{SID}") == SID
    assert uris.session_id_of(f"copilot:///{SID}") == SID
    assert not uris.same_session(f"claude:/{SID}", "claude:/other")


def test_session_uri_round_trip():
    uri = uris.session_uri("scripted", SID)
    assert uri == f"scripted:/{SID}"
    parsed = uris.parse_session_uri(uri)
    assert (parsed.scheme, parsed.session_id, str(parsed)) == ("scripted", SID, uri)
    assert uris.parse_session_uri(uris.alias_uri(SID)).is_alias


@pytest.mark.parametrize(
    "bad", ["", "no-scheme", "claude:", "claude:/", "claude:/a/b", "ahp-root://"]
)
def test_malformed_session_uris_are_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"session URI|channel"):
        uris.parse_session_uri(bad)


def test_default_chat_is_unpadded_base64url_of_the_session_uri():
    session = f"claude:/{SID}"
    chat = uris.default_chat_uri(session)
    encoded = base64.urlsafe_b64encode(session.encode()).decode().rstrip("=")
    assert chat == f"ahp-chat://default/{encoded}"
    assert "=" not in chat
    assert uris.session_of_default_chat(chat) == session
    assert uris.is_chat_uri(chat)


@pytest.mark.parametrize("text", ["a", "ab", "abc", "√ünïcødé", "x" * 50])
def test_default_chat_round_trips_any_session_spelling(text):
    session = f"prov:/{text}"
    assert uris.session_of_default_chat(uris.default_chat_uri(session)) == session


@pytest.mark.parametrize(
    "garbage",
    ["", "ahp-chat://", "ahp-chat://default", "ahp-chat://default/!!!", "ahp-chat://default/YQ"],
)
def test_garbage_is_not_a_default_chat(garbage):
    assert uris.session_of_default_chat(garbage) is None


def test_the_legacy_chat_uri_resolves_to_the_default_chat():
    session = f"claude:/{SID}"
    legacy = uris.legacy_chat_uri(SID)
    assert legacy == f"ahp-chat:/{SID}"
    assert uris.resolve_default_chat(legacy, {SID: session}) == uris.default_chat_uri(session)
    assert uris.resolve_default_chat(legacy, {}) is None
    canonical = uris.default_chat_uri(session)
    assert uris.resolve_default_chat(canonical) == canonical


def test_a_session_answered_under_an_alias_spells_everything_from_it():
    held = f"claude:/{SID}"
    alias = uris.alias_uri(SID)
    state = {
        "defaultChat": uris.default_chat_uri(held),
        "chats": [{"resource": uris.default_chat_uri(held), "title": f"about {held}"}],
        "origin": held,
    }
    spelled = uris.respell_tree(state, held, alias)
    assert spelled == {
        "defaultChat": uris.default_chat_uri(alias),
        "chats": [{"resource": uris.default_chat_uri(alias), "title": f"about {held}"}],
        "origin": alias,
    }
    assert state["origin"] == held  # the held state is not touched
    assert uris.respell_session(held, alias) == alias
    assert uris.respell_session(uris.default_chat_uri(held), alias) == uris.default_chat_uri(alias)
    assert uris.respell_session("other:/x", alias) == "other:/x"
