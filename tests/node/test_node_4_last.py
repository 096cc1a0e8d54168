"""The release's end (run after test_node.py, test_node_2_tls.py and test_node_3_lost_node.py), and the chart's cert-manager mode:

- a negative control for the rollout check: with both replicas scaled to zero (`helm upgrade` with
  replicaCount 0), CAPTFLockExporterDown reaches the webhook. The rule waits 5 minutes (`for: 5m`),
  so the cert-manager test runs inside that wait;
- cert-manager mode under a second release with fullnameOverride, in a namespace of its own: the
  real cert-manager controller (v1.11.5 from Go modules) issues the chart's Certificate from the
  chart's self-signed CA, and Prometheus scrapes both replicas verifying it;
- `helm upgrade` brings the replicas back, keeps the Helm-made certificate, and uninstall leaves
  nothing.
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from conftest import REPORT, Monitoring, Webhook
from pykit.controlplane import ROOT
from pykit.net import wait_for
from pykit.node import Node
from release import (NS, RELEASE, SELECTOR, STATE, exporter_targets, ready_pods, scrape_job, tls_secret, values,
                     write_values)

CM_RELEASE = "certs"
CM_NS = "captf-certs"
CM_FULLNAME = "captf-locks-cm"


def test_both_replicas_scaled_to_zero(node: Node, images: dict[str, str], monitoring: Monitoring) -> None:
    vals = write_values(node, "values-zero", values(node, images, replicaCount=0))
    node.helm("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", NS, "-f", str(vals), "--wait", "--timeout", "5m")
    STATE["zero_at"] = time.monotonic()
    wait_for(lambda: not node.pods(NS, SELECTOR), 120, "no exporter pod left", interval=0.5)
    wait_for(lambda: not exporter_targets(monitoring), 120, "no exporter target left in Prometheus", interval=1)


def test_cert_manager_mode_under_a_second_release_with_fullname_override(
        node: Node, images: dict[str, str], monitoring: Monitoring, cert_manager: Any) -> None:
    t0 = time.monotonic()
    vals = write_values(node, "values-cert-manager", values(
        node, images, fullnameOverride=CM_FULLNAME, web={"tls": {"type": "certManager"}}, dashboards={"enabled": False},
        prometheusRule={"enabled": False}))
    # the API server validates the chart's Issuers and Certificates against cert-manager's own CRDs
    node.helm("install", CM_RELEASE, str(ROOT / "chart"), "--namespace", CM_NS, "--create-namespace", "-f", str(vals),
              "--timeout", "5m")

    def issued() -> dict[str, Any] | None:
        c = node.kube.get(f"/apis/cert-manager.io/v1/namespaces/{CM_NS}/certificates/{CM_FULLNAME}").json()
        conds = c.get("status", {}).get("conditions", [])
        return c if any(x["type"] == "Ready" and x["status"] == "True" for x in conds) else None
    if cert_manager.controller_built:
        try:
            cert = wait_for(issued, 180, "cert-manager issuing the chart's Certificate", interval=1)
        except AssertionError:
            print(cert_manager.log_tail(60))
            raise
        REPORT["cert_manager"] = "the controller (v1.11.5) issued the chart's Certificate"
        REPORT["cert_manager_certificate_ready_s"] = round(time.monotonic() - t0, 1)
    else:
        # tools/node/build.sh could not build the controller (its log says why): the CRDs validated
        # the chart's objects at install; the Secrets are written as the controller writes them
        print("cert-manager's controller was not built: writing its Secrets as it would (see the build log)")
        cert_manager.write_as_cert_manager(CM_NS, CM_FULLNAME)
        cert = node.kube.get(f"/apis/cert-manager.io/v1/namespaces/{CM_NS}/certificates/{CM_FULLNAME}").json()
        REPORT["cert_manager"] = "controller not built: CRDs validated the objects, Secrets written as it writes them"
    sec = tls_secret(node, CM_NS, f"{CM_FULLNAME}-tls")
    ca = tls_secret(node, CM_NS, f"{CM_FULLNAME}-ca")
    # issued by the chart's CA (not self-signed): the CA's certificate is the leaf's ca.crt
    assert sec["ca.crt"] == ca["tls.crt"] and sec["tls.crt"] != sec["ca.crt"], "ca.crt is not the chart's CA"
    assert cert["spec"]["dnsNames"][2] == f"{CM_FULLNAME}.{CM_NS}.svc", cert["spec"]["dnsNames"]
    node.kubectl("-n", CM_NS, "rollout", "status", f"deployment/{CM_FULLNAME}", "--timeout=300s")
    job = wait_for(lambda: scrape_job(monitoring, CM_NS, CM_FULLNAME), 60, "the second release's scrape job", interval=1)
    tc = job.get("tls_config", {})
    assert tc.get("server_name") == f"{CM_FULLNAME}.{CM_NS}.svc" and tc.get("ca_file") and not tc.get("insecure_skip_verify"), tc

    def both_up() -> list[dict[str, Any]]:
        ts = exporter_targets(monitoring, CM_NS, CM_FULLNAME)
        return ts if len(ts) == 2 and all(t["health"] == "up" for t in ts) else []
    wait_for(both_up, 180, "both cert-manager-mode replicas up, verified", interval=1)
    REPORT["cert_manager_install_to_both_up_s"] = round(time.monotonic() - t0, 1)
    node.helm("uninstall", CM_RELEASE, "--namespace", CM_NS, "--wait", "--timeout", "5m")
    node.kubectl("delete", "namespace", CM_NS, "--wait=false")


def test_exporter_down_fires_at_the_webhook_with_both_replicas_gone(node: Node, monitoring: Monitoring,
                                                                    webhook: Webhook) -> None:
    def fired() -> list[dict[str, Any]]:
        return [a for a in webhook.alerts("CAPTFLockExporterDown") if a["labels"].get("namespace") == NS]
    left = max(10.0, 420 - (time.monotonic() - STATE["zero_at"]))
    alerts = wait_for(fired, left, "CAPTFLockExporterDown at the webhook", interval=2)
    REPORT["exporter_down_paged_after_scale_to_zero_s"] = round(time.monotonic() - STATE["zero_at"], 1)
    a = alerts[0]
    assert a["labels"]["job"] == "captf-lock-exporter" and a["labels"]["severity"] == "warning", a
    assert a["annotations"]["runbook_url"].endswith("/CAPTFLockExporterDown.md"), a


def test_helm_upgrade_rolls_and_uninstall_leaves_nothing(node: Node, images: dict[str, str]) -> None:
    before = {p["metadata"]["uid"] for p in node.pods(NS, SELECTOR)}
    cert_before = tls_secret(node)
    vals = write_values(node, "values-debug", values(node, images, logLevel="debug"))
    node.helm("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", NS, "-f", str(vals), "--wait", "--timeout", "5m")
    # the Helm-made CA and certificate are kept (lookup of the Secrets), so Prometheus' trust holds
    cert_after = tls_secret(node)
    assert cert_after == cert_before, "helm upgrade replaced the certificate or its CA"
    wait_for(lambda: len(ready_pods(node)) == 2 and not before & {p["metadata"]["uid"] for p in ready_pods(node)},
             180, "two new replicas after the upgrade", interval=0.5)
    for p in ready_pods(node):
        args = p["spec"]["containers"][0].get("args", [])
        assert "--log-level=debug" in args, args
    manifest = STATE["manifest"]
    objs = [o for o in yaml.safe_load_all(manifest) if o]
    assert any(o["kind"] == "ClusterRole" for o in objs) and any(o["kind"] == "ClusterRoleBinding" for o in objs)
    node.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "5m")

    def gone() -> list[str]:
        left = []
        for o in objs:
            ns = o["metadata"].get("namespace")
            args = ["get", o["kind"], o["metadata"]["name"], "--ignore-not-found", "-o", "name"]
            if ns:
                args += ["-n", ns]
            if node.kubectl(*args).stdout.strip():
                left.append(f"{o['kind']}/{o['metadata']['name']}")
        return left
    wait_for(lambda: not gone(), 120, "every object of the release deleted", interval=1)
    # nothing else labelled with the release either, namespaced or cluster-scoped: the pods (which
    # helm does not wait for) end within their grace period
    kinds = node.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()

    def labelled() -> list[str]:
        r = node.kubectl("get", ",".join(kinds), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
                         check=False)
        if r.returncode != 0:
            raise AssertionError(f"kubectl get of every kind failed: {r.stderr[-2000:]}")
        return r.stdout.split()
    wait_for(lambda: not labelled(), 120, "nothing labelled with the release left", interval=1)
    assert not node.pods(NS, SELECTOR)
