"""A check's outcome, and the three ways of reporting a run: a table, JSON, JUnit XML."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal
from xml.etree import ElementTree

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    """One check: its name (``family.what``), pass/fail/skip, and why."""

    name: str
    status: Status
    detail: str
    seconds: float = 0.0

    @property
    def family(self) -> str:
        return self.name.partition(".")[0]


def failed(results: Iterable[CheckResult]) -> bool:
    return any(result.status == "fail" for result in results)


def counts(results: Sequence[CheckResult]) -> dict[Status, int]:
    found: dict[Status, int] = {"pass": 0, "fail": 0, "skip": 0}
    for result in results:
        found[result.status] += 1
    return found


def summary(results: Sequence[CheckResult]) -> str:
    found = counts(results)
    return f"{found['pass']} passed, {found['fail']} failed, {found['skip']} skipped"


_WORDS: dict[Status, str] = {"pass": "pass", "fail": "FAIL", "skip": "skip"}


def table(results: Sequence[CheckResult], url: str) -> str:
    """Plain text: one row a check, the detail's further lines indented under it."""
    width = max((len(result.name) for result in results), default=4)
    lines = [f"ahp check {url}", ""]
    for result in results:
        first, *rest = (result.detail or "").splitlines() or [""]
        lines.append(f"{_WORDS[result.status]:<4}  {result.name:<{width}}  {first}".rstrip())
        lines += [f"{'':<4}  {'':<{width}}  {line}".rstrip() for line in rest]
    lines += ["", summary(results)]
    return "\n".join(lines)


def as_json(results: Sequence[CheckResult], url: str) -> str:
    document = {
        "url": url,
        "ok": not failed(results),
        "counts": counts(results),
        "checks": [
            {key: value for key, value in asdict(result).items() if key != "seconds"}
            | {"seconds": round(result.seconds, 3)}
            for result in results
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def junit(results: Sequence[CheckResult], url: str) -> str:
    """JUnit XML: one test suite, one test case a check (classname: its family)."""
    found = counts(results)
    suite = ElementTree.Element(
        "testsuite",
        name="ahp check",
        tests=str(len(results)),
        failures=str(found["fail"]),
        errors="0",
        skipped=str(found["skip"]),
        time=f"{sum(result.seconds for result in results):.3f}",
    )
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="url", value=url)
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"ahp.check.{result.family}",
            name=result.name,
            time=f"{result.seconds:.3f}",
        )
        if result.status == "fail":
            first = (result.detail or "failed").splitlines()[0]
            ElementTree.SubElement(case, "failure", message=first).text = result.detail
        elif result.status == "skip":
            ElementTree.SubElement(case, "skipped", message=result.detail)
        elif result.detail:
            ElementTree.SubElement(case, "system-out").text = result.detail
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(
        suites, encoding="unicode"
    )
