"""Who may read, with ``--auth-service``: the chart rendered with ``web.auth.service: true`` and its
RBAC applied to a real RBAC-enforcing kube-apiserver. The exporter then asks for ``get`` on
``services/metrics`` and ``services/pages`` of its own Service (SubjectAccessReview with
resourceAttributes), so only the chart's reader Roles open the paths: a ServiceAccount that may get
the non-resource URL ``/metrics`` (the built-in ``system:monitoring`` ClusterRole, or a ClusterRole
like the chart's non-resource readers) is refused, where without the flag the monitoring agent reads
every lock holder. The audit log proves the exporter still sends only reads and the two reviews."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import requests

from conftest import REPORT, audit_summary, install_chart, render_chart
from pykit.builders import lock_lease, terraform_object
from pykit.controlplane import ControlPlane, Kube
from pykit.exporter import E, Exporter, wait_metric, wait_samples
from pykit.tls import SecretVolume, issue

M = "TerraformMachine"
REVIEWS = ("tokenreviews", "subjectaccessreviews")
RBAC = "rbac.authorization.k8s.io"


def service_account(kube: Kube, ns: str, name: str) -> str:
    """``ns/name`` (created if missing) and a token of it."""
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    return kube.token(ns, name)


def bind_cluster_role(kube: Kube, role: str, ns: str, sa: str) -> None:
    kube.apply({"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"test-{role.replace(':', '-')}-{ns}-{sa}"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})


def test_auth_service_roles_open_the_paths_non_resource_grants_do_not(
        cp: ControlPlane, kube: Kube, ns: str, tmp_path, start_exporter: Callable[..., Exporter]) -> None:
    mon = "monitoring-svcauth"
    if kube.get(f"/api/v1/namespaces/{mon}").status_code == 404:
        kube.namespace(mon)
    values: dict[str, Any] = {
        "fullnameOverride": "lock-exporter-svc",
        "web": {"auth": {"service": True}},
        "metricsReader": {"serviceAccounts": [{"name": "prometheus", "namespace": mon}]},
        "pagesReader": {"serviceAccounts": [{"name": "oncall", "namespace": mon}]},
    }
    inst = install_chart(kube, values, name="svcauth")
    # The flag exactly as the chart's Deployment passes it, and the Roles it relies on as applied.
    (dep,) = [o for o in render_chart(values, name="svcauth") if o["kind"] == "Deployment"]
    (flag,) = [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--auth-service=")]
    assert flag == f"--auth-service={inst.namespace}/lock-exporter-svc", flag
    readers = {o["metadata"]["name"]: o for o in inst.of_kind("Role")}
    assert sorted(readers) == ["lock-exporter-svc-metrics-reader", "lock-exporter-svc-pages-reader"], sorted(readers)
    assert not [o for o in inst.of_kind("ClusterRole") if any("nonResourceURLs" in r for r in o["rules"])]
    for name in readers:
        r = kube.get(f"/apis/{RBAC}/v1/namespaces/{inst.namespace}/rolebindings/{name}")
        assert r.status_code == 200, (name, r.status_code)

    prom = service_account(kube, mon, "prometheus")      # the chart's metrics-reader RoleBinding
    oncall = service_account(kube, mon, "oncall")        # the chart's pages-reader RoleBinding
    # What the system:monitoring group has: get on the non-resource URL /metrics (and health paths).
    assert kube.get(f"/apis/{RBAC}/v1/clusterroles/system:monitoring").status_code == 200
    monitor = service_account(kube, mon, "monitoring-agent")
    bind_cluster_role(kube, "system:monitoring", mon, "monitoring-agent")
    # The chart's readers without web.auth.service: get on /metrics, / and /locks/* as non-resource URLs.
    kube.apply({"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": "test-svcauth-url-reader"},
                "rules": [{"nonResourceURLs": ["/metrics", "/", "/locks/*"], "verbs": ["get"]}]})
    by_url = service_account(kube, mon, "url-reader")
    bind_cluster_role(kube, "test-svcauth-url-reader", mon, "url-reader")
    # The non-resource grant is real: the API server's own /metrics answers the monitoring agent.
    own = requests.get(cp.url + "/metrics", verify=str(cp.ca_file), timeout=30,
                       headers={"Authorization": f"Bearer {monitor}"})
    assert own.status_code == 200, own.status_code

    vol = SecretVolume(tmp_path / "tls")
    vol.write(*issue(cp.ca_file, cp.ca_file.with_name("ca.key"), "captf-lock-exporter"))
    since = time.time() - 1
    exp = start_exporter(token=inst.token, secure=True, scrape_token=prom, ca=str(cp.ca_file),
                         extra_args=("--tls-cert-file", str(vol.cert), "--tls-key-file", str(vol.key), flag))
    kube.create(terraform_object(M, ns, "web"))
    kube.create(lock_lease(ns, M, "web", who="alice@laptop"))
    wait_samples(exp, [E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web", **{"class": "foreign"})],
                 60, "the lock, scraped with the metrics-reader Role's token")

    page = f"/locks/{ns}/{M}/web"

    def status(token: str, path: str) -> int:
        r = requests.get(exp.url + path, verify=str(cp.ca_file), timeout=30,
                         headers={"Authorization": f"Bearer {token}"})
        if r.status_code != 200:
            assert "alice@laptop" not in r.text, (path, r.status_code)
        elif path != "/":
            assert "alice@laptop" in r.text, path
        return r.status_code

    got = {who: {path: status(tok, path) for path in ("/metrics", "/", page)}
           for who, tok in (("metrics-reader Role", prom), ("pages-reader Role", oncall),
                            ("system:monitoring ClusterRole", monitor), ("nonResourceURLs ClusterRole", by_url))}
    want = {"metrics-reader Role": {"/metrics": 200, "/": 403, page: 403},
            "pages-reader Role": {"/metrics": 403, "/": 200, page: 200},
            "system:monitoring ClusterRole": {"/metrics": 403, "/": 403, page: 403},
            "nonResourceURLs ClusterRole": {"/metrics": 403, "/": 403, page: 403}}
    assert got == want, got
    # The same install without --auth-service: the non-resource check lets the monitoring agent in,
    # with the lock holders (what the flag is for), and the chart's reader Roles open nothing.
    plain = start_exporter(token=inst.token, secure=True, scrape_token=monitor, ca=str(cp.ca_file),
                           extra_args=("--tls-cert-file", str(vol.cert), "--tls-key-file", str(vol.key)))
    wait_samples(plain, [E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web", **{"class": "foreign"})],
                 60, "the lock, scraped with the monitoring agent's token when the path is a non-resource URL")
    shared = requests.get(plain.url + "/metrics", verify=str(cp.ca_file), timeout=30,
                          headers={"Authorization": f"Bearer {monitor}"})
    assert shared.status_code == 200 and "alice@laptop" in shared.text, shared.status_code
    for token in (prom, oncall):
        r = requests.get(plain.url + "/metrics", verify=str(cp.ca_file), timeout=30,
                         headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403, r.status_code
    plain.stop()
    got["without --auth-service: system:monitoring ClusterRole on /metrics"] = {"/metrics": shared.status_code}

    # the health part of the body is rendered beside the scrapes: wait (bounded) for the nine refusals
    wait_metric(exp, lambda m: (m.get("captf_lock_exporter_http_auth_total", result="forbidden") or 0) >= 9,
                30, "http_auth_total{result=forbidden} to count the nine refusals")
    exp.stop()

    # The audit log: the exporter read (get/list/watch) and created the two reviews, nothing else.
    reqs = cp.requests_of(inst.user, since)
    summary = audit_summary(cp, inst.user, since)
    reviews: dict[str, int] = {}
    for r in reqs:
        ref = r.get("objectRef") or {}
        if r["verb"] not in ("get", "list", "watch"):
            assert r["verb"] == "create" and ref.get("resource") in REVIEWS, (r["verb"], r["requestURI"])
            reviews[ref["resource"]] = reviews.get(ref["resource"], 0) + 1
    assert reviews.get("tokenreviews", 0) >= 4 and reviews.get("subjectaccessreviews", 0) >= 12, reviews
    assert not summary["refused"], summary["refused"]
    REPORT["auth_service"] = {"flag": flag, "status": got, "verbs": summary["by_verb"], "reviews": reviews}
    print("auth_service:", json.dumps(REPORT["auth_service"]))
