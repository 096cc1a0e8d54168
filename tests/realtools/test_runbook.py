"""Locks taken by the real ``kubernetes`` backend of OpenTofu and Terraform, classified by the
exporter, and released by the runbook's commands run as printed, with the real kubectl and tools,
as the on-call identity of the runbook's "Before you begin" (never an admin).

Per tool:
- a runner: an apply in a UTS namespace named after a runner pod the test created (so ``Who`` is
  ``<user>@<pod>``): own_live while it runs; SIGKILL leaves the lock held; own_stale with the pod
  ``Failed`` (set through pods/status) and after the pod is deleted; released by the runbook's
  manual force-unlock (the runbook page's block) run with the *other* tool when both are built;
- a workstation: foreign, overdue past lockTimeoutSeconds, released by the force-unlock ``explain``
  prints; and a clean exit, which releases the lock by itself;
- a lock-info that does not parse: force-unlock fails as documented; the guarded patch is refused
  with a wrong ID ("The request is invalid"), accepted by ``--dry-run=server`` and then for real;
- a lock ID over 1,024 bytes (kept cut): the printed force-unlock refuses a holder that changed
  hands after ``explain`` ran, and releases the one it saw.

The exporter must show every release within 5 s; the latencies go to the session report.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import REPORT, TOOLS, OnCall
from pykit.builders import LOCK_INFO_ANNOTATION, pod, runner_pod_name, state_suffix, terraform_object
from pykit.controlplane import ROOT, Kube
from pykit.exporter import Exporter, wait_metric
from pykit.net import wait_for
from pykit.realtools import manual_unlock_script, page_commands, printed_commands

M = "TerraformMachine"
NAME = "web"
#: spec.jobs.lockTimeoutSeconds of the test object: a foreign lock is overdue after this
LOCK_TIMEOUT = 15
#: the exporter must show a release within this many seconds
RELEASE_WITHIN = 5.0
#: how long the first lock may take: a cold tool reads its plugins and the API on a busy machine
LOCK_TAKEN_WITHIN = 180


def captf_labels() -> dict[str, str]:
    """The labels CAPTF's Jobs pass to the backend (state.BackendLabels) for TerraformMachine web."""
    return {"captf.infrastructure.cluster.x-k8s.io/owner-kind": M,
            "captf.infrastructure.cluster.x-k8s.io/owner-name": NAME,
            "cluster.x-k8s.io/cluster-name": "", "captf.io/managed": "true",
            "clusterctl.cluster.x-k8s.io/move": ""}


def hcl_map(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def backend_config(ns: str, kubeconfig: Path) -> dict[str, str]:
    """The -backend-config values of a CAPTF Job, with config_path instead of in_cluster_config."""
    return {"secret_suffix": state_suffix(ns, M, NAME), "namespace": ns, "config_path": str(kubeconfig),
            "labels": hcl_map(captf_labels())}


def lease_of(ns: str) -> str:
    return f"lock-tfstate-default-{state_suffix(ns, M, NAME)}"


def get_lease(kube: Kube, ns: str) -> dict[str, Any] | None:
    r = kube.get(kube.path("leases", ns, lease_of(ns)))
    return r.json() if r.status_code == 200 else None


def holder(kube: Kube, ns: str) -> str:
    lease = get_lease(kube, ns)
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""


def wait_held(kube: Kube, ns: str, apply_proc, what: str) -> dict[str, Any]:
    def held() -> dict[str, Any] | None:
        assert apply_proc.proc.poll() is None, f"{what} exited early:\n{apply_proc.output()}"
        lease = get_lease(kube, ns)
        return lease if lease and (lease.get("spec") or {}).get("holderIdentity") else None
    return wait_for(held, LOCK_TAKEN_WITHIN, f"{what} to take the state lock", interval=0.2)


def lock_info(lease: dict[str, Any]) -> dict[str, Any]:
    return json.loads(lease["metadata"]["annotations"][LOCK_INFO_ANNOTATION])


def lock_series(exp: Exporter, ns: str) -> dict[str, str] | None:
    return exp.scrape().labels("captf_state_lock_info", namespace=ns, name=NAME)


def wait_class(exp: Exporter, ns: str, cls: str, timeout: float = 15) -> dict[str, str]:
    return wait_metric(exp, lambda m: (m.labels("captf_state_lock_info", namespace=ns, name=NAME) or {})
                       .get("class") == cls, timeout, f"class {cls}").labels(
        "captf_state_lock_info", namespace=ns, name=NAME)


def wait_released(exp: Exporter, ns: str, since: float, how: str, tool: str) -> float:
    """Waits (at most RELEASE_WITHIN s) for the exporter to show the lock released; returns the
    latency from ``since`` (monotonic, when the releasing command returned)."""
    wait_metric(exp, lambda m: m.get("captf_state_lock_held", namespace=ns, kind=M, name=NAME) == 0
                and m.labels("captf_state_lock_info", namespace=ns, name=NAME) is None,
                RELEASE_WITHIN, f"the release ({how}) on /metrics")
    latency = round(time.monotonic() - since, 2)
    REPORT["releases"].append({"tool": tool, "how": how, "latency_s": latency})
    return latency


def count(tool: str, cls: str, n: int = 1) -> None:
    key = f"{tool}/{cls}"
    REPORT["commands"][key] = REPORT["commands"].get(key, 0) + n


def assert_labels_are_lock_info(series: dict[str, str], info: dict[str, Any], cls: str) -> None:
    want = {"class": cls, "holder": info["Who"], "lock_id": info["ID"], "operation": info["Operation"],
            "version": info["Version"], "kind": M, "name": NAME}
    got = {k: series.get(k) for k in want}
    assert got == want, f"captf_state_lock_info labels {got} are not the lock-info the tool wrote {info}"


def assert_acquired_is_created(exp: Exporter, ns: str, info: dict[str, Any]) -> None:
    created = dt.datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", info["Created"]).replace("Z", "+00:00"))
    got = exp.scrape().get("captf_state_lock_created_timestamp_seconds", namespace=ns, kind=M, name=NAME)
    assert got is not None and abs(got - created.timestamp()) < 1e-3, (got, info["Created"])


def explain(oncall: OnCall, ns: str) -> str:
    r = oncall.shell.run(f"captf-lock-exporter explain terraformmachine/{NAME} -n {ns}")
    assert r.returncode == 0, f"explain exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def page(exp: Exporter, ns: str) -> str:
    r = exp.get(f"/locks/{ns}/TerraformMachine/{NAME}")
    assert r.status_code == 200, r.status_code
    return r.text


def run_inspections(oncall: OnCall, cmds: list[str], checks: dict[str, Callable[[str], bool]],
                    tool: str, cls: str) -> None:
    """Runs every command (read-only ones: exit 0) and checks the output of each one whose text
    contains a key of ``checks``. Every key must match a command."""
    used = set()
    for cmd in cmds:
        if cmd.endswith(" -w"):
            # the follow command never exits by itself: it must print the pod, then it is stopped
            r = oncall.shell.run(f"timeout 5 {cmd}")
            assert r.returncode == 124, f"{cmd!r}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        else:
            r = oncall.shell.run(cmd)
            assert r.returncode == 0, f"{cmd!r} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        count(tool, cls)
        for key, check in checks.items():
            if key in cmd:
                used.add(key)
                out = r.stdout + r.stderr
                assert check(out), f"{cmd!r} printed what the runbook does not say:\n{out}"
    assert used == set(checks), f"no command for {set(checks) - used} among {cmds}"


def other_tool(tool: str) -> str:
    """The other tool when both are built (a lock of one released by the other), else the same."""
    others = [t for t in TOOLS if t != tool]
    return others[0] if others else tool


RUNBOOKS = ROOT / "docs" / "runbooks"


def runbook_pages() -> list[Path]:
    """docs/runbooks/*.md, "Before you begin" first (its blocks are the ones every page builds on)."""
    pages = sorted(RUNBOOKS.glob("*.md"), key=lambda p: (p.name != "before-you-begin.md", p.name))
    assert len(pages) >= 10, f"only {pages} in {RUNBOOKS}"
    return pages


def runbook_block_after(page: str, marker: str) -> str:
    text = (RUNBOOKS / page).read_text()
    m = re.search(r"```sh\n(.*?)```", text[text.index(marker):], re.S)
    assert m, f"docs/runbooks/{page}: no sh block after {marker!r}"
    return m.group(1).strip()


#: the runbook's Confirm after a manual release (CAPTFStateLockForeignOverdue)
RUNBOOK_CONFIRM = runbook_block_after("CAPTFStateLockForeignOverdue.md",
                                      "Afterwards, check that `spec.holderIdentity` is empty")


def runbook_block(containing: str) -> str:
    for page in runbook_pages():
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S):
            if containing in block:
                return block
    raise AssertionError(f"docs/runbooks: no sh block contains {containing!r}")


@pytest.fixture(params=TOOLS)
def tool(request: pytest.FixtureRequest) -> str:
    return request.param


def test_runner_lock_live_stale_and_released(tool: str, ns: str, kube: Kube, oncall: OnCall, iac,
                                             admin_kubeconfig: Path, start_exporter, tmp_path: Path) -> None:
    t = iac(tool)
    kube.create(terraform_object(M, ns, NAME, jobs={"lockTimeoutSeconds": LOCK_TIMEOUT}))
    exp = start_exporter()
    runner = tmp_path / "runner"
    t.init(runner, backend_config(ns, admin_kubeconfig))
    p = runner_pod_name(M, NAME)
    kube.create(pod(ns, p, "Running", kind=M, owner=NAME))
    run = t.start_apply(runner, p, 3600, tmp_path / "runner-apply.log")
    lease = wait_held(kube, ns, run, f"{tool} apply in pod {p}")
    info = lock_info(lease)
    assert info["ID"] == lease["spec"]["holderIdentity"], info
    assert info["Who"] == f"{getpass.getuser()}@{p}", info
    assert info["Operation"] == "OperationTypeApply" and info["Version"] == t.version, info
    # the backend's own labels plus CAPTF's, as the exporter's watch selects them
    assert lease["metadata"]["labels"] == {**captf_labels(), "tfstate": "true", "tfstateWorkspace": "default",
                                           "tfstateSecretSuffix": state_suffix(ns, M, NAME),
                                           "app.kubernetes.io/managed-by": "terraform"}, lease["metadata"]
    REPORT.setdefault("lock_info", {})[tool] = {k: info[k] for k in ("Operation", "Who", "Version")}

    # own_live: the runbook's inspections, from explain and from the lock page
    assert_labels_are_lock_info(wait_class(exp, ns, "own_live"), info, "own_live")
    assert_acquired_is_created(exp, ns, info)
    text = explain(oncall, ns)
    assert "own_live lock" in text and f"Pod {p}: exists and has not finished" in text, text
    live_checks = {"-o yaml": lambda o: f"holderIdentity: {info['ID']}" in o and LOCK_INFO_ANNOTATION in o,
                   "--field-selector": lambda o: p in o and "Running" in o,
                   "jsonpath": lambda o: o.strip() == info["ID"]}
    run_inspections(oncall, printed_commands(text), live_checks, tool, "own_live")
    run_inspections(oncall, page_commands(page(exp, ns)),
                    dict(live_checks, explain=lambda o: "own_live lock" in o), tool, "own_live")

    # SIGKILL: nothing releases the lock
    run.kill()
    assert holder(kube, ns) == info["ID"], "a SIGKILLed apply leaves the lock held"
    kube.set_pod_phase(ns, p, "Failed")
    assert_labels_are_lock_info(wait_class(exp, ns, "own_stale"), info, "own_stale")
    text = explain(oncall, ns)
    assert "own_stale lock" in text and "Succeeded or Failed (listed just now): finished" in text, text
    assert "pending" not in text, text
    stale_checks = {"-o yaml": live_checks["-o yaml"], "jsonpath": live_checks["jsonpath"],
                    "--field-selector": lambda o: p in o and "Failed" in o,
                    "reconcile-nudge": lambda o: "annotated" in o}
    run_inspections(oncall, printed_commands(text), stale_checks, tool, "own_stale")
    obj = kube.get_obj("terraformmachines", ns, NAME)
    assert "captf-lock-exporter/reconcile-nudge" in obj["metadata"].get("annotations", {}), obj["metadata"]
    run_inspections(oncall, page_commands(page(exp, ns)),
                    dict(stale_checks, explain=lambda o: "own_stale lock" in o), tool, "own_stale")

    # the pod deleted: still own_stale, now from a live read that finds no pod
    kube.delete("pods", ns, p, grace_period=0)
    wait_for(lambda: kube.get(kube.path("pods", ns, p)).status_code == 404, 30, "the pod gone")
    text = explain(oncall, ns)
    assert "own_stale lock" in text and "not found (live read): gone" in text, text
    gone_checks = dict(stale_checks, **{"--field-selector": lambda o: "No resources found" in o})
    run_inspections(oncall, printed_commands(text), gone_checks, tool, "own_stale")
    assert wait_class(exp, ns, "own_stale")

    # released by the runbook's manual force-unlock (CAPTFStateLockStale, step 2 -> ForeignOverdue,
    # step 2), run as printed in the runbook, with the other tool when both are built
    releaser = other_tool(tool)
    block = runbook_block('"$TF" force-unlock -force -- "$HID"')
    if releaser != "tofu":
        assert "TF=tofu   # or TF=terraform" in block
        block = block.replace("TF=tofu   #", f"TF={releaser}   #", 1)
    hid = oncall.shell.run(runbook_block('HID="$(kubectl').split("\n")[0] + '\necho "$HID"',
                           env={"NS": ns, "LEASE": lease_of(ns)}).stdout.strip()
    assert hid == info["ID"], hid
    env = {"NS": ns, "LEASE": lease_of(ns), "SUFFIX": state_suffix(ns, M, NAME), "HID": hid}
    r = oncall.shell.run("set -e\n" + block, env=env, timeout=300)
    done = time.monotonic()
    count(tool, "own_stale")
    assert r.returncode == 0 and "successfully unlocked" in r.stdout, f"{r.stdout}\n{r.stderr}"
    wait_released(exp, ns, done, f"own_stale: runbook force-unlock with {releaser}", tool)
    confirm = oncall.shell.run(RUNBOOK_CONFIRM, env=env)
    assert confirm.returncode == 0 and confirm.stdout.strip() == "", confirm


def test_workstation_lock_foreign_overdue_and_released(tool: str, ns: str, kube: Kube, oncall: OnCall, iac,
                                                      admin_kubeconfig: Path, start_exporter,
                                                      tmp_path: Path) -> None:
    t = iac(tool)
    kube.create(terraform_object(M, ns, NAME, jobs={"lockTimeoutSeconds": LOCK_TIMEOUT}))
    exp = start_exporter()
    ws = tmp_path / "workstation"
    t.init(ws, backend_config(ns, admin_kubeconfig))
    host = f"laptop-{tool}"

    # a clean exit releases the lock by itself
    run = t.start_apply(ws, host, 2, tmp_path / "clean-apply.log")
    info = lock_info(wait_held(kube, ns, run, f"{tool} apply on {host}"))
    assert info["Who"] == f"{getpass.getuser()}@{host}", info
    assert run.wait(120) == 0, run.output()
    wait_released(exp, ns, time.monotonic(), "clean exit", tool)
    assert holder(kube, ns) == "", "a clean exit releases the lock"

    run = t.start_apply(ws, host, 3600, tmp_path / "apply.log")
    info = lock_info(wait_held(kube, ns, run, f"{tool} apply on {host}"))
    assert_labels_are_lock_info(wait_class(exp, ns, "foreign"), info, "foreign")
    assert exp.scrape().get("captf_state_lock_overdue", namespace=ns, kind=M, name=NAME) == 0
    text = explain(oncall, ns)
    assert "foreign lock" in text and "becomes overdue in" in text, text
    assert "kubectl get pod" not in text and f"the host {host} is not a CAPTF runner pod" in text, text
    foreign_checks = {"-o yaml": lambda o: f"holderIdentity: {info['ID']}" in o,
                      "jsonpath": lambda o: o.strip() == info["ID"]}
    cmds = [c for c in printed_commands(text) if "force-unlock" not in c]
    run_inspections(oncall, cmds, foreign_checks, tool, "foreign")

    # past lockTimeoutSeconds: overdue
    wait_metric(exp, lambda m: m.get("captf_state_lock_overdue", namespace=ns, kind=M, name=NAME) == 1,
                LOCK_TIMEOUT + 30, "overdue past lockTimeoutSeconds")
    text = explain(oncall, ns)
    assert "foreign lock, OVERDUE" in text, text
    run_inspections(oncall, page_commands(page(exp, ns)),
                    dict(foreign_checks, explain=lambda o: "foreign lock, OVERDUE" in o), tool, "foreign")

    # the person's machine died: the force-unlock explain prints, run as printed
    run.kill()
    releaser = other_tool(tool)
    run_manual_unlock(oncall, exp, ns, text, releaser, tool, f"foreign: explain's force-unlock with {releaser}")
    confirm = [c for c in printed_commands(text) if "jsonpath" in c][-1]
    r = oncall.shell.run(confirm)
    assert r.returncode == 0 and r.stdout == "", f"Confirm printed {r.stdout!r}"


def abandoned_lock(tool: str, ns: str, kube: Kube, iac, admin_kubeconfig: Path, start_exporter,
                   tmp_path: Path) -> tuple[Exporter, dict[str, Any]]:
    """An exporter, and the Lease of a lock the tool took on a workstation and never released
    (the apply was killed)."""
    t = iac(tool)
    kube.create(terraform_object(M, ns, NAME, jobs={"lockTimeoutSeconds": LOCK_TIMEOUT}))
    exp = start_exporter()
    ws = tmp_path / "ws"
    t.init(ws, backend_config(ns, admin_kubeconfig))
    run = t.start_apply(ws, f"laptop-{tool}", 3600, tmp_path / "apply.log")
    lease = wait_held(kube, ns, run, f"{tool} apply")
    run.kill()
    return exp, lease


def run_manual_unlock(oncall: OnCall, exp: Exporter, ns: str, explain_text: str, releaser: str, tool: str,
                      how: str) -> None:
    """Runs the workstation force-unlock explain printed, with ``releaser``; the exporter shows the
    release."""
    script = manual_unlock_script(explain_text).replace("TF=tofu\n", f"TF={releaser}\n", 1)
    r = oncall.shell.run("set -e\n" + script, timeout=300)
    done = time.monotonic()
    count(tool, "foreign", script.count("\n"))
    assert r.returncode == 0 and "successfully unlocked" in r.stdout, f"{script}\n{r.stdout}\n{r.stderr}"
    wait_released(exp, ns, done, how, tool)


def test_unparseable_lock_info_guarded_patch(tool: str, ns: str, kube: Kube, oncall: OnCall, iac,
                                            admin_kubeconfig: Path, start_exporter, tmp_path: Path) -> None:
    exp, lease = abandoned_lock(tool, ns, kube, iac, admin_kubeconfig, start_exporter, tmp_path)
    hid = lease["spec"]["holderIdentity"]
    # something other than the backend wrote a lock-info no tool can parse
    kube.patch("leases", ns, lease_of(ns), {"metadata": {"annotations": {LOCK_INFO_ANNOTATION: '{"ID":"x","Who":'}}})
    wait_class(exp, ns, "unknown")

    text = explain(oncall, ns)
    assert "unknown lock" in text and "lock-info:     rejected" in text, text
    for never in ["(from observed)", "becomes overdue in", "Age:           0s"]:
        assert never not in text, f"one-shot explain says {never!r}:\n{text}"
    assert "Age:           unknown" in text, text
    release = [c for c in printed_commands(text) if c.startswith("kubectl patch lease")]
    assert len(release) == 1, text
    release = release[0]
    # the lock page prints the same release, and its inspections run too
    cmds = page_commands(page(exp, ns))
    assert release in cmds, cmds
    run_inspections(oncall, [c for c in cmds if c != release],
                    {"-o yaml": lambda o: f"holderIdentity: {hid}" in o, "jsonpath": lambda o: o.strip() == hid,
                     "explain": lambda o: "unknown lock" in o}, tool, "unknown")

    # force-unlock cannot release it, with the right ID, as the runbook says: its block, as printed
    block = runbook_block('"$TF" force-unlock -force -- "$HID"').replace("TF=tofu   #", f"TF={tool}   #", 1)
    env = {"NS": ns, "LEASE": lease_of(ns), "SUFFIX": state_suffix(ns, M, NAME), "HID": hid}
    r = oncall.shell.run("set -e\n" + block, env=env, timeout=300)
    count(tool, "unknown")
    assert r.returncode != 0 and "Failed to unlock state" in r.stdout + r.stderr, f"{r.stdout}\n{r.stderr}"
    assert holder(kube, ns) == hid

    # a write that must not happen yet: the guarded patch, accepted by the server's dry run only
    r = oncall.shell.run(release + " --dry-run=server")
    count(tool, "unknown")
    assert r.returncode == 0 and "patched" in r.stdout, f"{r.stdout}\n{r.stderr}"
    assert holder(kube, ns) == hid, "--dry-run=server changed nothing"
    # the holder "changed": the same patch with another ID is refused, and says only this
    wrong = release.replace(json.dumps(hid), json.dumps("not-" + hid), 1)
    assert wrong != release
    r = oncall.shell.run(wrong)
    count(tool, "unknown")
    assert r.returncode == 1 and "The request is invalid" in r.stderr, f"{r.stdout}\n{r.stderr}"
    REPORT.setdefault("refused_guarded_patch", r.stderr.strip())
    assert holder(kube, ns) == hid
    # as printed: released
    r = oncall.shell.run(release)
    done = time.monotonic()
    count(tool, "unknown")
    assert r.returncode == 0 and "patched" in r.stdout, f"{r.stdout}\n{r.stderr}"
    wait_released(exp, ns, done, "unknown: the guarded patch", tool)
    confirm = [c for c in printed_commands(text) if "jsonpath" in c][-1]
    r = oncall.shell.run(confirm)
    count(tool, "unknown")
    assert r.returncode == 0 and r.stdout == "", r
    lease = get_lease(kube, ns)
    assert LOCK_INFO_ANNOTATION not in (lease["metadata"].get("annotations") or {}), lease["metadata"]



def test_force_unlock_as_printed_takes_an_id_that_starts_with_a_dash(tool: str, ns: str, kube: Kube,
                                                                      oncall: OnCall, iac, admin_kubeconfig: Path,
                                                                      start_exporter, tmp_path: Path) -> None:
    """A Lease writer chose the lock ID ``-foo``. The force-unlock explain prints ends the flags with
    ``--`` (Go's flag package would read ``-foo`` as an unknown flag): run as printed, it releases."""
    exp, lease = abandoned_lock(tool, ns, kube, iac, admin_kubeconfig, start_exporter, tmp_path)
    info = lock_info(lease)
    info["ID"] = "-foo"
    kube.patch("leases", ns, lease_of(ns), {"spec": {"holderIdentity": "-foo"},
                                             "metadata": {"annotations": {LOCK_INFO_ANNOTATION: json.dumps(info)}}})
    wait_class(exp, ns, "foreign")
    text = explain(oncall, ns)
    assert "force-unlock -force -- -foo)" in text, text
    run_manual_unlock(oncall, exp, ns, text, tool, tool, f"foreign: force-unlock -- -foo with {tool}")


def test_force_unlock_as_printed_refuses_a_cut_holder_that_changed_hands(tool: str, ns: str, kube: Kube,
                                                                         oncall: OnCall, iac,
                                                                         admin_kubeconfig: Path,
                                                                         start_exporter, tmp_path: Path) -> None:
    """Issue 51, item 3. A Lease writer chose a lock ID over 1,024 bytes: the exporter keeps it cut,
    and the force-unlock ``explain`` prints reads it whole from the Lease when pasted. If the lock
    changed hands in between, the printed commands must release nothing (jq refuses a holder of
    another length or head); on the holder ``explain`` saw, they release it."""
    exp, lease = abandoned_lock(tool, ns, kube, iac, admin_kubeconfig, start_exporter, tmp_path)
    info = lock_info(lease)
    long_id = info["ID"] + "-" + "x" * 1500
    seen = dict(info, ID=long_id)
    kube.patch("leases", ns, lease_of(ns), {"spec": {"holderIdentity": long_id},
                                             "metadata": {"annotations": {LOCK_INFO_ANNOTATION: json.dumps(seen)}}})
    wait_class(exp, ns, "foreign")
    text = explain(oncall, ns)
    assert f"spec.holderIdentity is {len(long_id)} bytes, shown cut" in text, text
    assert '-- "$HID")' in text, text
    script = manual_unlock_script(text).replace("TF=tofu\n", f"TF={tool}\n", 1)

    # released and taken again (a new run's UUID) before the printed command is pasted
    new_id = "0b7c5e1a-34f2-4d8e-9c61-2f0a5b9d7e43"
    kube.patch("leases", ns, lease_of(ns), {"spec": {"holderIdentity": new_id},
                                             "metadata": {"annotations": {
                                                 LOCK_INFO_ANNOTATION: json.dumps(dict(info, ID=new_id))}}})
    r = oncall.shell.run("set -e\n" + script, timeout=300)
    assert r.returncode != 0 and "spec.holderIdentity is no longer the one read" in r.stderr, \
        f"{script}\n{r.stdout}\n{r.stderr}"
    assert "successfully unlocked" not in r.stdout, r.stdout
    assert holder(kube, ns) == new_id, "the new holder's lock was released"
    count(tool, "foreign", script.count("\n"))

    # the holder explain saw: as printed, it releases
    kube.patch("leases", ns, lease_of(ns), {"spec": {"holderIdentity": long_id},
                                             "metadata": {"annotations": {LOCK_INFO_ANNOTATION: json.dumps(seen)}}})
    run_manual_unlock(oncall, exp, ns, text, tool, tool, f"foreign: cut holderIdentity with {tool}")
    assert holder(kube, ns) == "", "the lock explain saw is released"
