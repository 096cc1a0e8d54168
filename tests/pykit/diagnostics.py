"""What a failed test reports: fixtures register sources of sections with ``on_failure``; the
pytest plugin ``pykit.pytest_hooks`` attaches them to the failed test's report.

A source is a callable returning ``(title, text)`` pairs, evaluated only if the test fails.
"""

from __future__ import annotations

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
