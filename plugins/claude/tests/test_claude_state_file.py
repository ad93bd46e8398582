"""The Claude backend's state file: the CLI's own transcript, and nothing outside its folder."""

from __future__ import annotations

from pathlib import Path

from ahp_claude.backend import ClaudeBackend

SESSION = "11111111-2222-4333-8444-777777777777"
LINKED = "11111111-2222-4333-8444-888888888888"


def no_spawn(*args: object, **kwargs: object) -> None:
    raise AssertionError("nothing here starts a chat")


def test_the_transcript_is_the_state_file_and_a_link_out_is_not(
    tmp_path: Path, claude_env: dict[str, str]
) -> None:
    projects = Path(claude_env["CLAUDE_CONFIG_DIR"]) / "projects" / "-work-repo"
    projects.mkdir(parents=True)
    transcript = projects / f"{SESSION}.jsonl"
    transcript.write_text('{"type": "queue-operation", "sessionId": "x"}\n')
    outside = tmp_path / "secret.txt"
    outside.write_text("not the CLI's")
    (projects / f"{LINKED}.jsonl").symlink_to(outside)
    backend = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, probe=False, watch=False)
    try:
        assert backend.state_file(SESSION) == transcript
        assert backend.state_file(LINKED) is None
        assert backend.state_file("99999999-2222-4333-8444-777777777777") is None
        # A subagent's chat has no file of its own under that name.
        assert backend.state_file(f"{SESSION}/toolu_1") is None
    finally:
        backend.stop()
