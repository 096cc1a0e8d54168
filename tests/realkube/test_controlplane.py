"""The control plane is what it claims to be: TLS that a client must verify, token authentication,
RBAC, the audit log; and the exporter really verifies the server's certificate."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest
import requests
import yaml

from conftest import RESOURCES
from pykit.controlplane import KUBE_VERSION, ControlPlane, Kube, _write_pki
from pykit.exporter import Exporter, wait_metric


def test_version_tls_tokens_rbac_and_audit(cp: ControlPlane, kube: Kube, install) -> None:
    assert kube.get("/version").json()["gitVersion"] == KUBE_VERSION
    # TLS: without the test CA the certificate does not verify
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(cp.url + "/version", verify=True, timeout=5)
    # tokens: a wrong one is 401; the chart's ServiceAccount token may read leases but not secrets
    s = requests.Session()
    s.trust_env = False
    s.verify = str(cp.ca_file)
    # An exporter of the same ServiceAccount may be running (another test's): its watch restarts
    # and pod reads land in the same window, so this test's requests are told by their User-Agent.
    agent = "captf-realkube-test/controlplane"
    s.headers["User-Agent"] = agent
    assert s.get(cp.url + "/api/v1/pods", headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 401
    sa = {"Authorization": f"Bearer {install.token}"}
    since = time.time() - 1
    assert s.get(cp.url + "/apis/coordination.k8s.io/v1/leases", headers=sa, timeout=5).status_code == 200
    assert s.get(cp.url + "/api/v1/secrets", headers=sa, timeout=5).status_code == 403
    assert s.post(cp.url + "/api/v1/namespaces/default/configmaps", headers=sa, timeout=5,
                  json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).status_code == 403
    reqs = [r for r in cp.requests_of(install.user, since) if r.get("userAgent") == agent]
    seen = sorted((r["verb"], r["objectRef"]["resource"], r["responseStatus"]["code"]) for r in reqs)
    assert seen == [("create", "configmaps", 403), ("list", "leases", 200), ("list", "secrets", 403)], seen


def test_exporter_verifies_the_server_certificate(cp: ControlPlane, install, tmp_path: Path,
                                                  start_exporter) -> None:
    """A kubeconfig that names another CA: every request fails on TLS (reason transport), nothing
    is listed; the same exporter with the right CA is up (the other tests)."""
    other = tmp_path / "other-ca"
    other.mkdir()
    _write_pki(other)
    kc = cp.kubeconfig(tmp_path / "kubeconfig-wrong-ca", install.token)
    cfg = yaml.safe_load(kc.read_text())
    cfg["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        (other / "ca.crt").read_bytes()).decode()
    kc.write_text(yaml.safe_dump(cfg))
    from pykit.exporter import exporter_bin
    exp = Exporter(exporter_bin(), kc, tmp_path / "exporter-wrong-ca.log", log_level="info")
    exp.start()
    try:
        exp.wait_healthy()
        m = wait_metric(exp, lambda m: all((m.get("captf_lock_exporter_watch_errors_total", resource=r,
                                                  reason="transport") or 0) >= 1 for r in RESOURCES),
                        60, "every watch failing on TLS")
        assert all(m.get("captf_lock_exporter_watch_up", resource=r) == 0 for r in RESOURCES)
        assert exp.get("/readyz").status_code == 503, "transient failures hold readiness back (contract 8.2)"
    finally:
        exp.stop()
