"""The image as the chart runs it (issue 24): runc runs the image scripts/image.sh built with the
rendered chart's args, probes, securityContext and resources, and the in-cluster configuration a
kubelet gives the pod (a projected, bound, 10-minute ServiceAccount token; ca.crt; namespace;
KUBERNETES_SERVICE_HOST/PORT) against a real kube-apiserver with the chart's RBAC.

The tests run in file order on one container: ready, confined as the chart says, every class on
/metrics, token rotation, SIGTERM, the root filesystem untouched."""

from __future__ import annotations

import re
import time
from pathlib import Path

import requests

from conftest import REPORT, Pod, binding_secret, elapsed_since, jwt_claims, token_request
from pykit.builders import lock_lease, runner_pod_name, terraform_object
from pykit.controlplane import ControlPlane, Kube, audit_time
from pykit.exporter import E, wait_samples
from pykit.net import wait_for
from realkube.test_classes import EXPECTED_CLASSES, M, build_class_scenario, class_expectations

import runtime_spec


def test_ready_on_the_chart_probe_paths(pod: Pod) -> None:
    ready = pod.probes["readinessProbe"]
    live = pod.probes["livenessProbe"]
    wait_for(lambda: pod.probe("livenessProbe").status_code == 200, 30, f"liveness {live['path']} 200")
    alive = elapsed_since(pod.container.started_at)
    # later than this, the kubelet would have restarted the container
    budget = live.get("initialDelaySeconds", 0) + live["periodSeconds"] * live["failureThreshold"]
    assert alive < budget, f"{live['path']} answered after {alive} s: the liveness probe would have killed it"
    wait_for(lambda: pod.probe("readinessProbe").status_code == 200, 60, f"readiness {ready['path']} 200")
    REPORT["start_to_live_s"] = alive
    REPORT["start_to_ready_s"] = elapsed_since(pod.container.started_at)
    log = pod.container.log_path.read_text(errors="replace")
    # in-cluster: no kubeconfig in the image, the ServiceAccount files were taken
    assert "no Kubernetes configuration" not in log, log[-2000:]


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def _cgroup_dir(pid: int, controller: str) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return Path("/sys/fs/cgroup") / controller / path.lstrip("/")
        if ctrls == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/")
    raise AssertionError(f"no {controller} cgroup for {pid}")


def test_confined_as_the_chart_says(pod: Pod) -> None:
    """Read from the running process, not from the spec we wrote: user, capabilities, no new
    privileges, seccomp filter, read-only root, the memory limit and CPU shares in its cgroup."""
    pod_spec, c = runtime_spec.deployment_container(pod.objects)
    sec = runtime_spec.effective_security(pod_spec, c)
    pid = pod.container.init_pid()
    st = _status(pid)
    uid, gid = str(sec["runAsUser"]), str(sec["runAsGroup"])
    assert st["Uid"].split() == [uid] * 4 and st["Gid"].split() == [gid] * 4, (st["Uid"], st["Gid"])
    assert uid != "0"
    if "ALL" in sec["capabilities"]["drop"]:
        for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(st[k], 16) == 0, f"{k} {st[k]}: capabilities left after drop ALL"
    assert st["NoNewPrivs"] == ("1" if sec["allowPrivilegeEscalation"] is False else "0")
    assert st["Seccomp"] == "2", f"Seccomp {st['Seccomp']}: no filter (RuntimeDefault asks for one)"
    root = [l.split() for l in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if l.split()[4] == "/"]
    assert root and "ro" in root[-1][5].split(","), f"root mount {root[-1] if root else None} not read-only"
    sa = [l.split() for l in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
          if l.split()[4] == runtime_spec.SA_DIR]
    assert sa and "ro" in sa[-1][5].split(","), "ServiceAccount volume not mounted read-only"
    limits = c["resources"].get("limits", {})
    if "memory" in limits:
        d = _cgroup_dir(pid, "memory")
        f = d / ("memory.limit_in_bytes" if (d / "memory.limit_in_bytes").exists() else "memory.max")
        assert int(f.read_text()) == runtime_spec.quantity_bytes(limits["memory"]), f"{f}: {f.read_text()}"
        REPORT["memory_limit_bytes"] = int(f.read_text())
    req = c["resources"].get("requests", {})
    if "cpu" in req:
        d = _cgroup_dir(pid, "cpu")
        if (d / "cpu.shares").exists():
            assert int((d / "cpu.shares").read_text()) == max(2, runtime_spec.quantity_millicpu(req["cpu"]) * 1024 // 1000)
    # the exporter could read its in-cluster files as uid 65532
    ns = Path(f"/proc/{pid}/root{runtime_spec.SA_DIR}/namespace").read_text()
    assert ns == pod.install.namespace


def test_every_class_on_metrics(pod: Pod, kube: Kube) -> None:
    ns = "image-classes"
    kube.namespace(ns)
    facts = build_class_scenario(kube, ns)
    # run with the chart's arguments: idle objects have no series
    m = wait_samples(pod, class_expectations(ns, idle_objects=False), 60,
                     "every lock classified through the container")
    assert len(m.all("captf_state_lock_info", namespace=ns)) == len(EXPECTED_CLASSES)
    assert m.labels("captf_state_lock_info", namespace=ns, kind=M, name="foreign")["lock_id"] == \
        facts["foreign_info"]["ID"]
    REPORT["classes_seen"] = sorted({l["class"] for l, _ in m.all("captf_state_lock_info", namespace=ns)})
    # a wrong or missing credential on an https /metrics is refused (only when the chart serves https)
    if pod.base_url.startswith("https"):
        r = requests.get(pod.base_url + "/metrics", timeout=10, verify=False)
        assert r.status_code in (401, 403), f"/metrics without a token: {r.status_code}"


def _jti(r: dict) -> str:
    return ((r.get("user", {}).get("extra", {}) or {}).get("authentication.kubernetes.io/credential-id") or ["?"])[0]


#: the test's own requests with the exporter's tokens carry this User-Agent and are left out
PROBE_AGENT = "captf-image-test-probe"


def _exporter_requests(cp: ControlPlane, user: str, since: float | None = None) -> list[dict]:
    return [r for r in cp.requests_of(user, since) if r.get("userAgent") != PROBE_AGENT]


def _credential_ids(cp: ControlPlane, user: str, since: float | None = None) -> dict[str, list[int]]:
    """JTI of each request the exporter made as ``user`` (the audit log's credential-id) ->
    response codes."""
    out: dict[str, list[int]] = {}
    for r in _exporter_requests(cp, user, since):
        out.setdefault(_jti(r), []).append((r.get("responseStatus") or {}).get("code", 0))
    return out


def test_rotated_token_is_taken_through_the_symlink_swap(pod: Pod, cp: ControlPlane, kube: Kube) -> None:
    """The kubelet's rotation: a new token in a new timestamped directory, ..data swapped; then the
    old token is revoked (its bound Secret deleted). The exporter's next requests carry the new
    token (audit log credential-id) and none is refused."""
    ns = pod.install.namespace
    user = pod.install.user
    old_jti = jwt_claims(pod.token)["jti"]
    claims = jwt_claims(pod.token)
    assert claims["aud"] == [pod.audience] and claims["exp"] - claims["iat"] == 600, claims
    wait_for(lambda: f"JTI={old_jti}" in _credential_ids(cp, user), 30, "the old token in the audit log")

    secret_b = binding_secret(kube, ns, "image-test-token-b")
    new = token_request(kube, ns, pod.install.sa, pod.audience, 600, secret_b)
    new_jti = jwt_claims(new)["jti"]
    old_dir = Path(pod.volume.path / "..data").resolve()
    new_dir = pod.volume.update({"token": new.encode(), "ca.crt": pod.ca, "namespace": ns.encode()})
    swapped = time.time()
    assert not old_dir.exists() and (pod.volume.path / "..data").resolve() == new_dir.resolve()
    assert (pod.volume.path / "token").read_text() == new

    kube.delete("secrets", ns, pod.token_secret)
    refused = requests.Session()
    refused.verify = str(cp.ca_file)
    refused.trust_env = False
    refused.headers["User-Agent"] = PROBE_AGENT

    def old_refused() -> bool:
        r = refused.get(cp.url + "/api", headers={"Authorization": f"Bearer {pod.token}"}, timeout=5)
        return r.status_code == 401
    wait_for(old_refused, 30, "the old token refused once its Secret is gone", interval=0.5)
    revoked = time.time()
    REPORT["old_token_refused_after_s"] = round(revoked - swapped, 1)

    # new requests: a lock whose runner pod is gone needs a live pod read before own_stale
    if kube.get("/api/v1/namespaces/image-classes").status_code == 404:
        kube.namespace("image-classes")
    kube.create(terraform_object(M, "image-classes", "rotated"))
    kube.create(lock_lease("image-classes", M, "rotated", who=f"root@{runner_pod_name(M, 'rotated', 'apply', 3)}"))
    wait_samples(pod, [E("captf_state_lock_info", 1, namespace="image-classes", kind=M, name="rotated",
                         **{"class": "own_stale"})], 60, "a lock classified after the rotation")

    def new_token_used() -> bool:
        return f"JTI={new_jti}" in _credential_ids(cp, user, revoked)
    wait_for(new_token_used, 30, "a request with the new token after the old was revoked")
    after = _credential_ids(cp, user, swapped)
    names = {f"JTI={old_jti}": "old token", f"JTI={new_jti}": "new token"}
    REPORT["token_rotation"] = {names.get(k, k): {"requests": len(v), "codes": sorted(set(v))}
                                for k, v in after.items()}
    first_new = min(audit_time(r["requestReceivedTimestamp"]) for r in _exporter_requests(cp, user, swapped)
                    if _jti(r) == f"JTI={new_jti}")
    REPORT["first_request_with_new_token_after_swap_s"] = round(first_new - swapped, 2)
    assert first_new < claims["exp"], "the new token was first used after the old one expired"
    # a refused token authenticates nobody: look for 401s of any user, the probe's left out
    unauthorized = [(e["requestURI"], e.get("userAgent")) for e in cp.audit_events()
                    if e.get("stage") == "ResponseComplete" and (e.get("responseStatus") or {}).get("code") == 401
                    and audit_time(e["requestReceivedTimestamp"]) >= swapped and e.get("userAgent") != PROBE_AGENT]
    assert not unauthorized, f"401 after the swap: {unauthorized}"
    # a request sent just before the swap may arrive just after it; from 1 s on, only the new token
    late = {k: v for k, v in _credential_ids(cp, user, swapped + 1).items() if k != f"JTI={new_jti}"}
    assert not late, f"requests after the swap with another credential than the new token: {late}"
    assert pod.probe("readinessProbe").status_code == 200
    log = pod.container.log_path.read_text(errors="replace")
    assert "token file changed" in log, "the exporter did not log the new token"


def test_sigterm_exit_within_the_grace_period_and_root_untouched(pod: Pod) -> None:
    from container import tree
    grace = pod.deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    t = time.monotonic()
    pod.container.signal("TERM")
    rc = pod.container.wait_exit(grace + 5)
    took = round(time.monotonic() - t, 2)
    REPORT["sigterm_exit_s"] = took
    REPORT["exit_code"] = rc
    assert rc == 0, f"exit code {rc} after SIGTERM"
    assert took < grace, f"exited {took} s after SIGTERM, grace period {grace} s"
    log = pod.container.log_path.read_text(errors="replace")
    assert not re.search(r"read-only file system|EROFS|os error 30", log, re.I), "the exporter tried to write"

    pod.container.runtime_cmd("delete", "--force", pod.container.cid, check=False)
    after = tree(pod.rootfs)
    # the runtime creates the mount points it lacks (as containerd does on the snapshot) before the
    # root turns read-only: those, empty, and only those may be new
    mountpoints = {m["destination"] for m in pod.spec["mounts"]}
    allowed = mountpoints | {str(p) for m in mountpoints for p in Path(m).parents}
    added = {p for p in after if p not in pod.tree_before}
    changed = {p for p in after if p in pod.tree_before and after[p] != pod.tree_before[p]}
    removed = {p for p in pod.tree_before if p not in after}
    bad_added = {p for p in added if p not in allowed or (len(after[p]) > 4 and after[p][4] != 0)}
    assert not (bad_added or changed or removed), \
        f"root filesystem written: added {sorted(bad_added)}, changed {sorted(changed)}, removed {sorted(removed)}"
    REPORT["runtime_mountpoints_created"] = sorted(added)
