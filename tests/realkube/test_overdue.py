"""The overdue flag and its warning on a real server: a foreign lock turns overdue by time alone."""

from __future__ import annotations

import datetime as dt
import json

from pykit.builders import lock_lease, now_utc, runner_pod_name, terraform_object
from pykit.controlplane import Kube
from pykit.exporter import E, Exporter, wait_samples
from pykit.net import wait_for

M = "TerraformMachine"


def overdue(ns: str, name: str, cls: str, value):
    return E("captf_state_lock_overdue", value, namespace=ns, kind=M, name=name, **{"class": cls})


def test_overdue_flag_and_warning(kube: Kube, ns: str, exporter: Exporter) -> None:
    two_hours_ago = now_utc() - dt.timedelta(hours=2)
    kube.create(terraform_object(M, ns, "old-foreign"))
    kube.create(terraform_object(M, ns, "old-stale"))
    kube.create(terraform_object(M, ns, "quick", jobs={"lockTimeoutSeconds": 3}))
    kube.create(lock_lease(ns, M, "old-foreign", who="alice@laptop", created=two_hours_ago))
    kube.create(lock_lease(ns, M, "old-stale", who=f"root@{runner_pod_name(M, 'old-stale')}", created=two_hours_ago))
    kube.create(lock_lease(ns, M, "quick", who="bob@desk"))
    wait_samples(exporter, [overdue(ns, "old-foreign", "foreign", 1), overdue(ns, "old-stale", "own_stale", 0),
                            overdue(ns, "quick", "foreign", 0)], 30, "old foreign overdue, fresh not yet")
    wait_samples(exporter, [overdue(ns, "quick", "foreign", 1)], 20, "overdue after its 3 s timeout")

    def warned() -> list:
        return [l for l in exporter.json_logs()
                if l.get("level", "").upper() == "WARN" and "overdue" in json.dumps(l) and "quick" in json.dumps(l)]
    lines = wait_for(warned, 15, "the overdue warning naming the lock")
    assert len(lines) == 1, lines
    text = json.dumps(lines[0])
    assert ns in text and "bob@desk" in text and "TerraformMachine" in text, text
