"""What a failed test reports: fixtures register sources of sections with ``on_failure``; the
pytest plugin ``pykit.pytest_hooks`` attaches them to the failed test's report.

A source is a callable returning ``(title, text)`` pairs, evaluated only if the test fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

Section = tuple[str, str]
Source = Callable[[], Iterable[Section]]

#: The attribute of a pytest item that holds its sources.
SOURCES_ATTR = "_pykit_failure_sources"


def on_failure(node: Any, source: Source) -> None:
    """Attach ``source()``'s sections to the report of the pytest item ``node`` when it fails."""
    if not hasattr(node, SOURCES_ATTR):
        setattr(node, SOURCES_ATTR, [])
    getattr(node, SOURCES_ATTR).append(source)


def log_section(proc: Any, tail: int) -> Section:
    """The last ``tail`` lines of a ``ManagedProcess``'s log, with its path and whether it still runs."""
    lines = proc.log_text().splitlines()
    rc = proc.returncode()
    state = "running" if rc is None else f"exited with {rc}"
    return (f"{proc.name} log {proc.log_path} (last {min(tail, len(lines))} of {len(lines)} lines; "
            f"process {state})", "\n".join(lines[-tail:]))


def report_measurements(terminalreporter: Any, suite: str, report: dict[str, Any], out: Path,
                        hide: Iterable[str] = ()) -> None:
    """``report`` as the "<suite> measurements" section of pytest's summary (but the keys in
    ``hide``), and whole as JSON in ``out``."""
    hidden = set(hide)
    terminalreporter.section(f"{suite} measurements")
    for k, v in report.items():
        if k not in hidden:
            terminalreporter.write_line(f"{k}: {json.dumps(v)}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        terminalreporter.write_line(f"(written to {out})")
    except OSError as e:
        terminalreporter.write_line(f"could not write {out}: {e}")
