"""pytest plugin (``pytest_plugins = ("pykit.pytest_hooks",)`` in a suite's conftest.py): when a test
fails, the sections its fixtures registered with ``pykit.diagnostics.on_failure`` are attached to
the report.  A source that raises is reported as unavailable; it does not hide the failure.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from pykit.diagnostics import SOURCES_ATTR


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    for source in getattr(item, SOURCES_ATTR, []):
        try:
            sections = list(source())
        except Exception as e:  # noqa: BLE001 - diagnostics only
            sections = [(getattr(source, "__name__", "diagnostics"), f"unavailable: {e!r}")]
        for title, text in sections:
            rep.sections.append((f"{title} [{rep.when}]", text))
