"""`locks -A -o json` and `explain` with a real kubeconfig: the chart's ServiceAccount token and the
cluster's CA.  The chart grants no Secrets, so explain's image lookup meets a real 403."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pykit.builders import create_oncall_locks, state_suffix
from pykit.controlplane import ControlPlane, Kube
from pykit.exporter import run_cli

M = "TerraformMachine"


def test_locks_and_explain_through_a_real_kubeconfig(cp: ControlPlane, kube: Kube, ns: str, install,
                                                     tmp_path: Path) -> None:
    create_oncall_locks(kube, ns, M)
    kc = cp.kubeconfig(tmp_path / "kubeconfig", install.token, namespace=ns)
    since = time.time() - 1

    res = run_cli(kc, "locks", "-A", "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout) if r["namespace"] == ns]
    assert [(r["name"], r["class"], r["overdue"]) for r in rows] == [
        ("web", "foreign", True), ("stale", "own_stale", False), ("live", "own_live", False)], rows
    assert rows[0]["lock_id"] == "lock-web-1"
    res = run_cli(kc, "locks", "-n", ns, "--fail-on-overdue")
    assert res.returncode == 1, res.stdout + res.stderr

    res = run_cli(kc, "explain", "TerraformMachine/web")
    assert res.returncode == 0, res.stderr
    suffix = state_suffix(ns, M, "web")
    for want in [f"kubectl get lease -n {ns} lock-tfstate-default-{suffix} -o yaml",
                 "\"$TF\" force-unlock -force -- lock-web-1",
                 "pinned image could not be read, so no command here runs it"]:
        assert want in res.stdout, f"missing {want!r} in\n{res.stdout}"
    # the 403 on the Secret is a real answer of the API server, and explain says so
    assert "403" in res.stdout or "forbidden" in res.stdout.lower(), res.stdout
    res = run_cli(kc, "explain", "terraformmachines/stale", "-n", ns)
    assert res.returncode == 0 and "own_stale lock" in res.stdout, res.stdout + res.stderr

    # what the API server recorded for these commands: reads only, one refusal (the Secret)
    reqs = cp.requests_of(install.user, since)
    assert reqs, "the audit log shows the commands' requests"
    assert {r["verb"] for r in reqs} <= {"get", "list", "watch"}, {r["verb"] for r in reqs}
    refused = [(r["verb"], r["objectRef"].get("resource"), r["responseStatus"]["code"]) for r in reqs
               if r.get("responseStatus", {}).get("code") in (401, 403)]
    assert refused and all(res_ == "secrets" and code == 403 for _, res_, code in refused), refused
