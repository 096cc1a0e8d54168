"""CAPTF's own alert rules beside ours (docs/captf-rules.md).

1. promtool loads our rule file and CAPTF's groups together, also merged into one file (as one
   Prometheus holds them): the group names differ, and the two CAPTFForceUnlocks live in
   different groups.
2. A real Alertmanager (``flavor``: Debian's 0.25 for prom2, 0.35 for prom3) runs with exactly the
   ``inhibit_rules`` block of docs/captf-rules.md. CAPTF's alerts and ours are posted through API v2
   as Prometheus posts them, with the labels each rule's aggregation leaves (read from the rule
   files, so a changed ``by`` changes the test). CAPTF's overlapping alerts are active until ours
   arrive, then suppressed by them; ours, CAPTF's alerts of another kind or reason, and
   CAPTFJobFailing stay active.

CAPTF's rules come from a stand-in (tests/e2e/fixtures/captf-rules.stand-in.yaml, see its header),
or from CAPTF's own file with CAPTF_RULES=<path> (a PrometheusRule or a plain rule file).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykit import REPO
from pykit.diagnostics import log_section, on_failure
from pykit.net import free_port, http_ok, wait_for
from pykit.process import ManagedProcess
from stack import Flavor

OURS = REPO / "alerts" / "captf-lock-exporter.rules.yaml"
DOC = REPO / "docs" / "captf-rules.md"
STAND_IN = Path(__file__).resolve().parent / "fixtures" / "captf-rules.stand-in.yaml"
MARKER = "<!-- captf-inhibit-rules:"


def captf_groups() -> list[dict[str, Any]]:
    path = Path(os.environ.get("CAPTF_RULES", STAND_IN))
    doc = yaml.safe_load(path.read_text())
    # CAPTF ships a PrometheusRule; Prometheus reads its .spec.
    return (doc.get("spec") or doc)["groups"]


def rule(groups: list[dict[str, Any]], alert: str) -> dict[str, Any]:
    found = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    assert found, f"no rule {alert}"
    return found[0]


def by_labels(expr: str) -> list[str]:
    """The labels the outermost ``... by (...)`` aggregation of ``expr`` keeps."""
    m = re.search(r"\b(?:sum|max|min)\s*by\s*\(([^)]*)\)", expr)
    assert m, f"no `by` aggregation in {expr}"
    return [s.strip() for s in m.group(1).split(",") if s.strip()]


def doc_inhibit_rules() -> list[dict[str, Any]]:
    """The YAML block after the marker in docs/captf-rules.md."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC} has no {MARKER} block"
    block = re.search(r"```yaml\n(.*?)```", text[text.index(MARKER):], re.S)
    assert block, "no yaml block after the marker"
    return yaml.safe_load(block.group(1))["inhibit_rules"]


def test_rules_load_together_in_promtool(flavor: Flavor, tmp_path: Path) -> None:
    ours = yaml.safe_load(OURS.read_text())["groups"]
    theirs = captf_groups()
    names = [g["name"] for g in ours + theirs]
    assert len(names) == len(set(names)), f"duplicate group names: {names}"
    both_fu = [g["name"] for g in ours + theirs for r in g["rules"] if r.get("alert") == "CAPTFForceUnlocks"]
    assert len(both_fu) == 2 and len(set(both_fu)) == 2, both_fu
    captf_file = tmp_path / "captf.rules.yaml"
    captf_file.write_text(yaml.safe_dump({"groups": theirs}))
    merged = tmp_path / "merged.rules.yaml"
    merged.write_text(yaml.safe_dump({"groups": ours + theirs}))
    for files in ([OURS, captf_file], [merged]):
        out = subprocess.run([flavor.promtool, "check", "rules", *map(str, files)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"promtool check rules {files}:\n{out.stdout}{out.stderr}"
    # The check is not blind to a clash: the same group twice in one file is refused.
    clash = tmp_path / "clash.rules.yaml"
    clash.write_text(yaml.safe_dump({"groups": ours + [dict(theirs[0], name=ours[0]["name"])]}))
    out = subprocess.run([flavor.promtool, "check", "rules", str(clash)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "repeated in the same file" in out.stdout + out.stderr, out


class Alertmanager(ManagedProcess):
    def __init__(self, binary: str, tmp: Path, inhibit_rules: list[dict[str, Any]]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "alertmanager.yml"
        cfg.write_text(yaml.safe_dump({
            # Nothing is sent; the test reads the alerts' status from the API.
            "route": {"receiver": "null", "group_by": ["..."]},
            "receivers": [{"name": "null"}],
            "inhibit_rules": inhibit_rules,
        }))
        (tmp / "am-data").mkdir()
        super().__init__("alertmanager", [
            binary, f"--config.file={cfg}", f"--storage.path={tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
        ], tmp / "alertmanager.log")

    def post(self, alerts: list[dict[str, str]]) -> None:
        """POST /api/v2/alerts as Prometheus does: startsAt now, endsAt a few resends ahead."""
        now = dt.datetime.now(dt.timezone.utc)
        body = [{
            "labels": labels,
            "annotations": {"summary": "test"},
            "startsAt": now.isoformat(),
            "endsAt": (now + dt.timedelta(minutes=10)).isoformat(),
            "generatorURL": "http://prometheus.test/graph",
        } for labels in alerts]
        req = urllib.request.Request(f"{self.url}/api/v2/alerts", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, r.status

    def states(self) -> dict[str, dict[str, Any]]:
        """Every alert by its sorted label set: {"state": ..., "inhibitedBy": [...]}."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as r:
            alerts = json.load(r)
        return {key(a["labels"]): a["status"] for a in alerts}


def listed(am: Alertmanager, n: int) -> dict[str, dict[str, Any]] | None:
    s = am.states()
    return s if len(s) == n else None


def key(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def test_ours_inhibit_captfs_overlapping_alerts(flavor: Flavor, tmp_path: Path,
                                               request: pytest.FixtureRequest) -> None:
    ours, theirs = yaml.safe_load(OURS.read_text())["groups"], captf_groups()
    # The labels each alert carries: its rule's `by` labels, alertname and the rule's own labels.
    # (`cluster` is among ours' and absent here: a Prometheus without that external label.)
    values = {"namespace": "team-a", "kind": "TerraformMachine", "name": "db", "reason": "locked",
              "class": "foreign", "holder": "alice@laptop", "operation": "OperationTypeApply",
              "lock_id": "id-1", "op": "apply"}

    def alert(groups: list[dict[str, Any]], name: str, **over: str) -> dict[str, str]:
        r = rule(groups, name)
        labels = {k: over.get(k, values[k]) for k in by_labels(r["expr"]) if k != "cluster"}
        return {"alertname": name, **labels, **r.get("labels", {})}

    captf_fu = alert(theirs, "CAPTFForceUnlocks")
    assert set(captf_fu) == {"alertname", "kind", "severity"}, captf_fu
    our_fu = alert(ours, "CAPTFForceUnlocks")
    assert {"namespace", "name", "kind"} <= set(our_fu), our_fu
    captf_locked = alert(theirs, "CAPTFStateUnreadable")
    our_overdue = alert(ours, "CAPTFStateLockForeignOverdue")
    inhibited = [captf_fu, captf_locked]
    untouched = [
        alert(theirs, "CAPTFForceUnlocks", kind="TerraformCluster"),  # another kind
        alert(theirs, "CAPTFStateUnreadable", reason="corrupt"),  # another reason
        alert(theirs, "CAPTFJobFailing"),  # not ours to judge
    ]
    sources = [our_fu, our_overdue]

    am = Alertmanager(flavor.alertmanager, tmp_path, doc_inhibit_rules())
    on_failure(request.node, lambda: [log_section(am, 60)])
    try:
        am.start()
        wait_for(lambda: (am.check_alive(), http_ok(f"{am.url}/-/ready"))[1], 30, "Alertmanager ready")
        # CAPTF's alerts alone: all active, nothing to inhibit them.
        am.post(inhibited + untouched)
        before = wait_for(lambda: listed(am, 5), 20, "CAPTF's 5 alerts listed")
        for a in inhibited + untouched:
            assert before[key(a)]["state"] == "active", (a, before[key(a)])
        # Ours arrive: CAPTF's overlapping ones are suppressed, by ours.
        am.post(sources)

        def settled() -> dict[str, dict[str, Any]] | None:
            s = am.states()
            done = len(s) == 7 and all(s[key(a)]["state"] == "suppressed" for a in inhibited)
            return s if done else None

        after = wait_for(settled, 20, "CAPTF's overlapping alerts suppressed")
        for a in inhibited:
            assert after[key(a)]["inhibitedBy"], (a, after[key(a)])
        for a in sources + untouched:
            assert after[key(a)]["state"] == "active" and not after[key(a)]["inhibitedBy"], (a, after[key(a)])
    finally:
        am.stop()

