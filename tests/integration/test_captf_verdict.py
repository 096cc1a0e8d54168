"""CAPTF's own verdict beside the exporter's, against kmock's emulator: StateReadable conditions
and TerraformPlans written as CAPTF writes them, read back from /metrics (condition, mismatch after
--verdict-grace, an active Job holding the comparison, pending plans), from `explain`, and from the
lock page in a real headless browser."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pykit.builders import (INFRA_GROUP, INFRA_VERSION, lock_info_doc, lock_lease, runner_pod_name,
                            terraform_object)
from pykit.exporter import exporter_bin, wait_metric
from pykit.kube import KubeEmulator, write_kubeconfig
from test_oncall import dump, needs_browser, run_cli

NS = "team-v"
M = "TerraformMachine"
MP = "TerraformMachinePool"
TAIL = ("; every Job waits lockTimeoutSeconds for it and fails. Release it with force-unlock once that "
        "holder is gone; see the stale-lock runbook")


def locked_message(lock_id: str, who: str, op: str = "OperationTypeApply") -> str:
    """CAPTF's foreignLock() wording (internal/controller/bookkeeping.go)."""
    return f"The state lock {lock_id} is held by {who} ({op}){TAIL}"


def with_condition(obj: dict, status: str, reason: str, message: str, active_job: bool = False) -> dict:
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
         "lastTransitionTime": "2026-11-30T09:00:00Z"},
        {"type": "StateReadable", "status": status, "reason": reason, "message": message,
         "lastTransitionTime": "2026-11-30T10:00:00Z"},
    ]
    if active_job:
        obj["status"]["activeJob"] = {"name": "j", "operation": "apply", "attempt": 1,
                                      "startTime": "2026-11-30T10:00:00Z"}
    return obj


def plan(ns: str, name: str, kind: str, target: str, phase: str) -> dict:
    return {"apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}", "kind": "TerraformPlan",
            "metadata": {"name": name, "namespace": ns, "labels": {"captf.io/plan-phase": phase}},
            "spec": {"targetRef": {"kind": kind, "name": target}, "planHash": "h", "inputsHash": "i",
                     "reason": "Destructive", "summary": {"replace": 1}},
            "status": {"phase": phase}}


def scenario(kube: KubeEmulator) -> None:
    # agrees: CAPTF names the workstation that holds the lock
    kube.create(with_condition(terraform_object(M, NS, "agree"), "False", "StateLocked",
                               locked_message("lock-a", "alice@laptop")))
    kube.create(lock_lease(NS, M, "agree", lock_info=lock_info_doc("alice@laptop", lock_id="lock-a")))
    # differs: CAPTF still names bob; lock-info says carol
    kube.create(with_condition(terraform_object(M, NS, "other"), "False", "StateLocked",
                               locked_message("lock-o", "bob@desk")))
    kube.create(lock_lease(NS, M, "other", lock_info=lock_info_doc("carol@laptop", lock_id="lock-o")))
    # differs: CAPTF says readable, a workstation holds the lock
    kube.create(with_condition(terraform_object(M, NS, "read"), "True", "StateRead", "The state was read"))
    kube.create(lock_lease(NS, M, "read", lock_info=lock_info_doc("dave@laptop", lock_id="lock-r")))
    # the same disagreement while a Job runs: not compared
    kube.create(with_condition(terraform_object(M, NS, "busy"), "True", "StateRead", "x", active_job=True))
    kube.create(lock_lease(NS, M, "busy", lock_info=lock_info_doc("erin@laptop", lock_id="lock-b")))
    # an own stale lock whose apply waits for a pending plan
    kube.create(with_condition(terraform_object(MP, NS, "pool"), "True", "StateRead", "ok"))
    kube.create(lock_lease(NS, MP, "pool", who=f"@{runner_pod_name(MP, 'pool', 'apply', 2)}"))
    kube.create(plan(NS, "pool-plan-1", MP, "pool", "Pending"))
    kube.create(plan(NS, "pool-plan-0", MP, "pool", "Superseded"))


def test_verdicts_and_plans_in_metrics(kube: KubeEmulator, start_exporter) -> None:
    scenario(kube)
    exp = start_exporter(extra_args=("--verdict-grace", "2s"))

    def settled(m):
        return (m.get("captf_state_lock_verdict_mismatch", name="other") == 1
                and m.get("captf_state_lock_verdict_mismatch", name="read") == 1
                and m.get("captf_state_lock_plan_pending", name="pool", plan="pool-plan-1") == 1)

    m = wait_metric(exp, settled, 30, "both disagreements reported after the 2 s grace")
    assert m.get("captf_state_lock_verdict_mismatch", name="agree") == 0
    assert m.get("captf_state_lock_verdict_mismatch", name="busy") == 0
    assert m.get("captf_state_lock_verdict_mismatch", name="pool") == 0
    assert m.get("captf_state_lock_job_active", name="busy") == 1
    assert m.get("captf_state_lock_job_active", name="agree") is None
    assert m.labels("captf_state_lock_captf_condition", name="agree") == {
        "namespace": NS, "kind": M, "name": "agree", "status": "False", "reason": "StateLocked"}
    assert [l["plan"] for l, _ in m.all("captf_state_lock_plan_pending")] == ["pool-plan-1"]
    assert "disagrees with the exporter" in exp.log_text()

    # CAPTF reconciles `read` and agrees that it is locked by dave: cleared at once.
    kube.patch("terraformmachines", NS, "read", {"status": {"conditions": [
        {"type": "StateReadable", "status": "False", "reason": "StateLocked",
         "message": locked_message("lock-r", "dave@laptop"), "lastTransitionTime": "2026-11-30T11:00:00Z"}]}})
    # The plan is approved: the object no longer waits.
    kube.patch("terraformplans", NS, "pool-plan-1", {"status": {"phase": "Approved"}})
    wait_metric(exp, lambda m: m.get("captf_state_lock_verdict_mismatch", name="read") == 0
                and not m.all("captf_state_lock_plan_pending"), 20, "agreement and approval seen")
    not_get = [(r.method, r.path) for r in kube.exporter_requests() if r.method != "GET"]
    assert not_get == [], not_get


def test_explain_shows_captfs_verdict_and_the_pending_plan(kube: KubeEmulator, tmp_path: Path) -> None:
    scenario(kube)
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    out = run_cli(kc, "explain", "tfm/other", "-n", NS)
    assert out.returncode == 0, out.stderr
    assert "  CAPTF says:    False/StateLocked since 2026-11-30T10:00:00Z: The state lock lock-o is held by bob@desk" in out.stdout
    assert "  Verdicts:      DIFFER: CAPTF's StateLocked message names holder \"bob@desk\"" in out.stdout, out.stdout
    out = run_cli(kc, "explain", "tfm/agree", "-n", NS)
    assert "  Verdicts:      agrees with the exporter" in out.stdout, out.stdout
    out = run_cli(kc, "explain", "tfmp/pool", "-n", NS)
    assert out.returncode == 0, out.stderr
    assert "own_stale lock" in out.stdout, out.stdout
    assert f"  Pending plan:  pool-plan-1 (review: kubectl get tfplan -n {NS} pool-plan-1 -o yaml)" in out.stdout
    assert "Approving it applies the plan's changes; the exporter never approves anything." in out.stdout
    assert "pool-plan-0" not in out.stdout, "a superseded plan is not pending"


@needs_browser
def test_the_lock_page_shows_captfs_verdict_in_a_browser(kube: KubeEmulator, start_exporter, tmp_path: Path) -> None:
    scenario(kube)
    exp = start_exporter(extra_args=("--verdict-grace", "1s"))
    wait_metric(exp, lambda m: m.get("captf_state_lock_verdict_mismatch", name="other") == 1, 30, "mismatch")
    wait_metric(exp, lambda m: m.get("captf_state_locks_held", **{"class": "own_stale"}) == 1, 30, "pool stale")
    dom = dump(exp.url + f"/locks/{NS}/{M}/other", tmp_path)
    assert '<span id="captf-condition"><b>False/StateLocked</b></span>' in dom, dom
    assert 'data-agreement="differs"' in dom and "reported: longer than --verdict-grace" in dom, dom
    dom = dump(exp.url + f"/locks/{NS}/{M}/agree", tmp_path)
    assert 'data-agreement="agrees"' in dom, dom
    dom = dump(exp.url + f"/locks/{NS}/{M}/busy", tmp_path)
    assert 'data-agreement="not_compared"' in dom and "Active Job" in dom, dom
    dom = dump(exp.url + f"/locks/{NS}/{MP}/pool", tmp_path)
    assert '<code class="pending-plan">pool-plan-1</code>' in dom, dom
    assert f"kubectl get tfplan -n {NS} pool-plan-1 -o yaml" in dom
    assert "pool-plan-0" not in dom
