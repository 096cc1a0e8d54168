#!/usr/bin/env python3
"""Breaks each shipped dashboard one key at a time, as a typo would, and requires the strict
decoder (tools/dashboards/strict, grafana-foundation-sdk's Go types) to fail naming the key;
the unbroken dashboards must pass first, or the cases prove nothing.

usage: strict_selftest.py DASHSTRICT_BINARY DASHBOARD.json...
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable


def first(d: dict[str, Any], ptype: str) -> dict[str, Any]:
    """The first panel of type ``ptype`` (rows' panels too)."""
    panels = list(d["panels"])
    for p in d["panels"]:
        panels += p.get("panels", [])
    for p in panels:
        if p["type"] == ptype:
            return p
    raise AssertionError(f"no {ptype} panel")


def rename(obj: dict[str, Any], old: str, new: str) -> None:
    assert old in obj, f"{old} not in {sorted(obj)}"
    obj[new] = obj.pop(old)


# name -> (panel type or None for the dashboard, mutation, the key the error must name)
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "stat options.colorMode -> colourMode": (lambda d: rename(first(d, "stat")["options"], "colorMode", "colourMode"), "colourMode"),
    "stat options.reduceOptions.calcs -> calc": (lambda d: rename(first(d, "stat")["options"]["reduceOptions"], "calcs", "calc"), "calc"),
    "timeseries options.legend.displayMode -> displaymode": (
        lambda d: rename(first(d, "timeseries")["options"]["legend"], "displayMode", "displaymode"), "displaymode"),
    "timeseries options.tooltip.mode: a number": (lambda d: first(d, "timeseries")["options"]["tooltip"].update(mode=1), "mode"),
    "table options.showHeader -> showHeaders": (lambda d: rename(first(d, "table")["options"], "showHeader", "showHeaders"), "showHeaders"),
    "stat fieldConfig.defaults.unit -> units": (lambda d: rename(first(d, "stat")["fieldConfig"]["defaults"], "unit", "units"), "units"),
    "timeseries fieldConfig.defaults.custom.lineWidth -> linewidth": (
        lambda d: rename(first(d, "timeseries")["fieldConfig"]["defaults"]["custom"], "lineWidth", "linewidth"), "linewidth"),
    "table fieldConfig.defaults.custom.align -> alignment": (
        lambda d: rename(first(d, "table")["fieldConfig"]["defaults"]["custom"], "align", "alignment"), "alignment"),
    "dashboard refresh -> refesh": (lambda d: rename(d, "refresh", "refesh"), "refesh"),
    "panel gridPos.w -> width": (lambda d: rename(first(d, "stat")["gridPos"], "w", "width"), "width"),
}


def run(binary: str, files: list[Path]) -> tuple[int, str]:
    p = subprocess.run([binary, *map(str, files)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main() -> int:
    binary, files = sys.argv[1], [Path(f) for f in sys.argv[2:]]
    rc, out = run(binary, files)
    if rc != 0:
        print(f"the unbroken dashboards fail:\n{out}")
        return 1
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            doc = json.loads(f.read_text())
            for name, (mutate, key) in CASES.items():
                d = copy.deepcopy(doc)
                try:
                    mutate(d)
                except AssertionError as e:  # the dashboard has no such panel: say so, not pass
                    if "no " in str(e) and "panel" in str(e):
                        continue
                    raise
                broken = Path(tmp) / f.name
                broken.write_text(json.dumps(d))
                rc, out = run(binary, [broken])
                if rc != 0 and key in out:
                    print(f"ok   {f.name}: {name}: rejected")
                else:
                    failed += 1
                    print(f"FAIL {f.name}: {name}: rc {rc}, output does not name {key!r}:\n{out}")
    total = len(files) * len(CASES)
    print(f"strict decoder self-test: {total} broken dashboards tried, {failed} accepted")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
