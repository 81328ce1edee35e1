"""A stage's numbers: a pytest stage's JUnit counts, a script stage's own $OPFORGE_STAGE_RESULT
(numbers, and artifacts added to the result)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ci import model as mx
from ci.report.result import Result

REPO = mx.REPO


def junit_numbers(path: Path) -> dict[str, Any]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    get = suite.attrib.get
    return {"tests": int(get("tests", 0)),
            "failures": int(get("failures", 0)) + int(get("errors", 0)),
            "skipped": int(get("skipped", 0)), "pytest_time_s": round(float(get("time", 0)), 1)}


def stage_numbers(path: Path, result: Result) -> dict[str, Any]:
    """The stage's own $OPFORGE_STAGE_RESULT: numbers, and artifacts added to the result."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    for artifact in data.get("artifacts", []):
        path = Path(artifact)
        if path.is_absolute() and path.is_relative_to(REPO):
            path = path.relative_to(REPO)   # report.md links relative to the repository
        result.artifacts.append(str(path))
    return {str(k): v for k, v in (data.get("numbers") or {}).items()}
