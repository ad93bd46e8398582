"""The reducer-fixture score line counts only what ran."""

from collections import Counter

from tests.conftest import summary_line


def test_no_fixtures_reports_none_ran_not_negative_counts():
    line = summary_line(Counter(skipped=1), set())
    assert line == "official reducer fixtures: none ran (1 skipped of 1)"
    assert "-" not in line.split(":", 1)[1]


def test_partial_counts_only_waived_cases_that_passed():
    line = summary_line(Counter(passed=3, failed=1), {"a.json", "005-session-turnstarted.json"})
    assert "3 passed (2 exactly, 1 with a field" in line
    assert "1 failed of 4" in line
