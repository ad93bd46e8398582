"""Choosing the actions that take a changeset's rows from what a client holds to a new read."""

from ahpcore import reducers
from ahpcore.services.changeset_marks import choose_actions, split_changeset_uri


def row(name: str, letter: str = "M") -> dict:
    uri = f"file:///r/{name}"
    side = {"uri": uri, "content": {"uri": uri}}
    return {"id": uri, "edit": {"after": side}, "_meta": {"ahp.staged": letter}}


def folded(old: list, actions: list) -> list:
    state = {"status": "ready", "files": old}
    for action in actions:
        state = reducers.reduce("changeset", state, action)
    return state["files"]


def test_nothing_moved_says_nothing() -> None:
    rows = [row("a"), row("b")]
    assert choose_actions(rows, [dict(r) for r in rows]) == []


def test_few_moves_go_per_file_and_many_as_one_content_change() -> None:
    old = [row(n) for n in "abcd"]
    new = [row("a", "A"), row("b"), row("c"), row("d"), row("e")]
    actions = choose_actions(old, new)
    assert [a["type"] for a in actions] == ["changeset/fileSet", "changeset/fileSet"]
    assert folded(old, actions) == new
    everything = [row(n, "D") for n in "abc"]
    actions = choose_actions(old, everything)
    assert [a["type"] for a in actions] == ["changeset/contentChanged"]
    assert folded(old, actions) == everything


def test_everything_gone_is_cleared_and_review_marks_stay_on_unmoved_rows() -> None:
    assert choose_actions([row("a")], []) == [{"type": "changeset/cleared"}]
    reviewed = {**row("a"), "reviewed": True}
    assert choose_actions([reviewed, row("b")], [row("a"), row("b")]) == []
    # A row that moved is sent again without its mark: the review was of something else.
    actions = choose_actions([reviewed, row("b")], [row("a", "A"), row("b")])
    assert actions == [{"type": "changeset/fileSet", "file": row("a", "A")}]


def test_changeset_uris_split_at_the_scope() -> None:
    assert split_changeset_uri("claude:/x/changeset/turn/t1") == ("claude:/x", "turn/t1")
    assert split_changeset_uri("claude:/x") is None
