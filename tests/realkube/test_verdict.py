"""CAPTF's own verdict and its plans on a real kube-apiserver: StateReadable conditions written
through the status subresource as CAPTF's manager writes them, TerraformPlans validated by the CRD's
enums, read by the exporter with the chart's RBAC (get/list/watch on terraformplans)."""

from __future__ import annotations

from pykit.builders import INFRA_GROUP, INFRA_VERSION, lock_info_doc, lock_lease, terraform_object
from pykit.controlplane import ApiError, Kube
from pykit.exporter import E, Exporter, wait_samples

TM, TMP = "TerraformMachine", "TerraformMachinePool"
TAIL = ("; every Job waits lockTimeoutSeconds for it and fails. Release it with force-unlock once that "
        "holder is gone; see the stale-lock runbook")


def set_condition(kube: Kube, resource: str, ns: str, name: str, status: str, reason: str, message: str,
                  active_job: bool = False) -> None:
    body = {"status": {"conditions": [{"type": "StateReadable", "status": status, "reason": reason,
                                       "message": message, "lastTransitionTime": "2026-11-30T10:00:00Z",
                                       "observedGeneration": 1}]}}
    body["status"]["activeJob"] = ({"name": "j", "operation": "apply", "attempt": 1,
                                    "startTime": "2026-11-30T10:00:00Z"} if active_job else None)
    kube.patch(resource, ns, name, body, sub="status")


def plan(ns: str, name: str, target: str, kind: str = TMP) -> dict:
    return {"apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}", "kind": "TerraformPlan",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"targetRef": {"kind": kind, "name": target}, "planHash": "h", "inputsHash": "i",
                     "reason": "Destructive", "summary": {"replace": 1}}}


def test_condition_mismatch_and_pending_plan(kube: Kube, ns: str, start_exporter) -> None:
    exp: Exporter = start_exporter(extra_args=("--verdict-grace", "2s"))
    kube.create(terraform_object(TM, ns, "web"))
    kube.create(lock_lease(ns, TM, "web", lock_info=lock_info_doc("carol@laptop", lock_id="lock-w")))
    set_condition(kube, "terraformmachines", ns, "web", "False", "StateLocked",
                  f"The state lock lock-w is held by bob@desk (OperationTypeApply){TAIL}")
    kube.create(terraform_object(TMP, ns, "pool"))
    kube.create(plan(ns, "pool-plan-1", "pool"))
    kube.patch("terraformplans", ns, "pool-plan-1", {"status": {"phase": "Pending"}}, sub="status")
    obj = {"namespace": ns, "kind": TM, "name": "web"}
    wait_samples(exp, [
        E("captf_state_lock_captf_condition", 1, status="False", reason="StateLocked", **obj),
        E("captf_state_lock_verdict_mismatch", 1, **obj),
        E("captf_state_lock_plan_pending", 1, namespace=ns, kind=TMP, name="pool", plan="pool-plan-1"),
    ], 60, "CAPTF's condition, the mismatch after the grace, and the pending plan")
    # A Job starts: CAPTF stops looking, and so does the comparison.
    set_condition(kube, "terraformmachines", ns, "web", "False", "StateLocked",
                  f"The state lock lock-w is held by bob@desk (OperationTypeApply){TAIL}", active_job=True)
    wait_samples(exp, [E("captf_state_lock_verdict_mismatch", 0, **obj),
                       E("captf_state_lock_job_active", 1, **obj)], 30, "an active Job holds it")
    kube.patch("terraformplans", ns, "pool-plan-1", {"status": {"phase": "Approved"}}, sub="status")
    wait_samples(exp, [E("captf_state_lock_plan_pending", None, namespace=ns, kind=TMP, name="pool",
                         plan="pool-plan-1")], 30, "the approved plan no longer pending")


def test_the_crd_refuses_a_plan_for_a_machine(kube: Kube, ns: str) -> None:
    try:
        kube.create(plan(ns, "bad", "m", kind=TM))
    except ApiError as e:
        assert "Unsupported value" in str(e), e
    else:
        raise AssertionError("a TerraformPlan for a TerraformMachine was accepted")
