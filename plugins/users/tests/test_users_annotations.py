"""Annotations with people: who wrote each entry, and whose sessions each role may annotate.

Over real sockets, with the people file written by `ahp users`; one test per cell of
docs/security.md's annotations row, and the writer stamped on each entry by the host.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from ahpcore.testing import AhpTestClient
from plugins.users.tests.test_users import add, host_with_people
from tests.sessions.conftest import open_session

pytestmark = pytest.mark.anyio

ROOT = f"root:{socket.gethostname()}"


def annotation(session: str, ident: str, *entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": ident,
        "origin": {"session": session},
        "resource": "file:///work/app.py",
        "resolved": False,
        "entries": list(entries),
    }


def entry(ident: str, text: str = "Why this?", **meta: Any) -> dict[str, Any]:
    return {"id": ident, "text": text, **({"_meta": meta} if meta else {})}


async def answer(client: AhpTestClient, channel: str, action: dict[str, Any]) -> dict[str, Any]:
    return await client.answer_to(await client.dispatch(channel, action))


def writers(state: dict[str, Any], ident: str) -> dict[str, Any]:
    [held] = [a for a in state["annotations"] if a["id"] == ident]
    return {e["id"]: (e.get("_meta") or {}).get("ahp.owner") for e in held["entries"]}


async def held(client: AhpTestClient, channel: str) -> dict[str, Any]:
    return (await client.request("subscribe", {"channel": channel}))["snapshot"]["state"]


@pytest.fixture
def people(tmp_path):  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    return {
        "ann": add(state, "ann", "admin"),
        "bob": add(state, "bob", "member"),
        "carol": add(state, "carol", "member"),
        "vic": add(state, "vic", "viewer"),
    }


async def test_each_entry_says_who_wrote_it_and_a_forged_writer_is_not_kept(tmp_path, people):
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=people["bob"])
        a = await running.connect("ann", token=people["ann"])
        root = await running.connect("root")
        for client in (b, a, root):
            await client.initialize()
        session, _ = await open_session(b, 1)
        notes = f"{session}/annotations"

        # the member on their own session, claiming to be someone else
        forged = entry("e1", **{"ahp.owner": "user:ann", "kept": 1})
        echoed = await answer(
            b, notes, {"type": "annotations/set", "annotation": annotation(session, "a1", forged)}
        )
        assert "rejectionReason" not in echoed, echoed
        said = echoed["action"]["annotation"]["entries"][0]["_meta"]
        assert said == {"ahp.owner": "user:bob", "kept": 1}

        # an admin adds an entry; the host's own token another
        added = await answer(
            a, notes, {"type": "annotations/entrySet", "annotationId": "a1", "entry": entry("e2")}
        )
        assert "rejectionReason" not in added, added
        added = await answer(
            root,
            notes,
            {"type": "annotations/entrySet", "annotationId": "a1", "entry": entry("e3")},
        )
        assert "rejectionReason" not in added, added
        state = await held(b, notes)
        assert writers(state, "a1") == {"e1": "user:bob", "e2": "user:ann", "e3": ROOT}

        # the whole annotation sent again by bob with one entry reworded: only that one is his
        entries = [dict(e) for e in state["annotations"][0]["entries"]]
        entries[1] = {**entries[1], "text": "Reworded by bob"}
        for one in entries:
            one.pop("_meta", None)  # a client that drops _meta does not lose the writers
        again = annotation(session, "a1", *entries)
        assert "rejectionReason" not in await answer(
            b, notes, {"type": "annotations/set", "annotation": again}
        )
        state = await held(b, notes)
        assert writers(state, "a1") == {"e1": "user:bob", "e2": "user:bob", "e3": ROOT}
        await running.aclose(check=False)


async def test_an_admin_annotates_a_members_session(tmp_path, people):
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=people["bob"])
        a = await running.connect("ann", token=people["ann"])
        for client in (b, a):
            await client.initialize()
        session, _ = await open_session(b, 1)
        notes = f"{session}/annotations"
        assert "result" in await a.request_frame("subscribe", {"channel": notes})
        echoed = await answer(
            a,
            notes,
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e"))},
        )
        assert "rejectionReason" not in echoed, echoed
        assert writers(await held(b, notes), "a1") == {"e": "user:ann"}
        await running.aclose(check=False)


async def test_a_member_may_not_watch_or_annotate_another_members_session(tmp_path, people):
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=people["bob"])
        c = await running.connect("carol", token=people["carol"])
        for client in (b, c):
            await client.initialize()
        session, _ = await open_session(b, 1)
        notes = f"{session}/annotations"
        frame = await c.request_frame("subscribe", {"channel": notes})
        assert frame["error"]["code"] == -32009, frame
        assert "belongs to user:bob" in frame["error"]["message"]
        for action in (
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e"))},
            {"type": "annotations/removed", "annotationId": "a1"},
        ):
            refused = await answer(c, notes, action)
            assert "belongs to user:bob" in refused["rejectionReason"], refused
        # nothing was written: bob's channel is still empty
        assert (await held(b, notes))["annotations"] == []
        await running.aclose(check=False)


async def test_a_viewer_watches_annotations_and_writes_none(tmp_path, people):
    async with host_with_people(tmp_path) as running:
        b = await running.connect("bob", token=people["bob"])
        v = await running.connect("vic", token=people["vic"])
        for client in (b, v):
            await client.initialize()
        session, _ = await open_session(b, 1)
        notes = f"{session}/annotations"
        assert "rejectionReason" not in await answer(
            b,
            notes,
            {"type": "annotations/set", "annotation": annotation(session, "a1", entry("e"))},
        )
        assert writers(await held(v, notes), "a1") == {"e": "user:bob"}
        refused = await answer(
            v, notes, {"type": "annotations/entrySet", "annotationId": "a1", "entry": entry("f")}
        )
        assert "viewer" in refused["rejectionReason"], refused
        assert writers(await held(b, notes), "a1") == {"e": "user:bob"}
        await running.aclose(check=False)
