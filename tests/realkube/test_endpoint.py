"""The exporter's own endpoint as the default install serves it: HTTPS with a certificate from
files (laid out as a kubelet lays out a Secret volume, rotated in place), bearer tokens reviewed by
the real kube-apiserver (TokenReview) and the path authorized by its RBAC (SubjectAccessReview on a
non-resource URL). The audit log proves the two reviews are the only requests that are not
get/list/watch, and that a scrape every 100 ms costs the API server a few reviews a minute."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import requests

from conftest import REPORT, install_chart
from pykit.chart import metrics_reader_token
from pykit.builders import lock_lease, terraform_object
from pykit.controlplane import ControlPlane, Kube
from pykit.exporter import E, Exporter, wait_metric, wait_samples
from pykit.net import wait_for
from pykit.tls import SecretVolume, issue, pem_fingerprint, served_fingerprint

M = "TerraformMachine"
REVIEWS = ("tokenreviews", "subjectaccessreviews")


def service_account(kube: Kube, ns: str, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})


def reviews_of(cp: ControlPlane, user: str, since: float) -> list[dict[str, Any]]:
    return [r for r in cp.requests_of(user, since)
            if (r.get("objectRef") or {}).get("resource") in REVIEWS]


def test_tls_authn_authz_rotation_and_audit(cp: ControlPlane, kube: Kube, ns: str, tmp_path,
                                           start_exporter: Callable[..., Exporter]) -> None:
    inst = install_chart(kube, {"fullnameOverride": "lock-exporter-sec"}, name="sec")
    mon = "monitoring-sec"
    prom_token = metrics_reader_token(kube, inst, mon, "prometheus")
    service_account(kube, mon, "nobody")
    nobody_token = kube.token(mon, "nobody")
    ca_key = cp.ca_file.with_name("ca.key")
    vol = SecretVolume(tmp_path / "tls")
    first = issue(cp.ca_file, ca_key, "captf-lock-exporter")
    vol.write(*first)

    since = time.time() - 1
    exp = start_exporter(token=inst.token, secure=True, scrape_token=prom_token, ca=str(cp.ca_file),
                         extra_args=("--tls-cert-file", str(vol.cert), "--tls-key-file", str(vol.key)))
    kube.create(terraform_object(M, ns, "web"))
    kube.create(lock_lease(ns, M, "web", who="alice@laptop"))
    wait_samples(exp, [E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web",
                         **{"class": "foreign"})], 30, "the lock, scraped over TLS with a token")

    url = exp.url
    ca = str(cp.ca_file)
    anon = requests.get(url + "/metrics", verify=ca, timeout=5)
    assert anon.status_code == 401, anon.text
    assert anon.headers.get("WWW-Authenticate", "").startswith("Bearer"), anon.headers
    assert "alice@laptop" not in anon.text
    bad = requests.get(url + "/metrics", verify=ca, timeout=5, headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code == 401, bad.text
    denied = requests.get(url + "/metrics", verify=ca, timeout=5,
                          headers={"Authorization": f"Bearer {nobody_token}"})
    assert denied.status_code == 403, denied.text
    assert "alice@laptop" not in denied.text
    allowed = requests.get(url + "/metrics", verify=ca, timeout=5,
                           headers={"Authorization": f"Bearer {prom_token}"})
    assert allowed.status_code == 200 and "alice@laptop" in allowed.text
    # The pages need their own nonResourceURLs: the scraper's role is not enough.
    page = requests.get(url + f"/locks/{ns}/{M}/web", verify=ca, timeout=5,
                        headers={"Authorization": f"Bearer {prom_token}"})
    assert page.status_code == 403, page.text
    for open_path in ("/healthz", "/readyz"):
        assert requests.get(url + open_path, verify=ca, timeout=5).status_code == 200, open_path
    # No plain HTTP on the TLS port.
    try:
        plain = requests.get(f"http://127.0.0.1:{exp.port}/metrics", timeout=5)
        assert plain.status_code != 200, "plain HTTP answered on the HTTPS port"
    except requests.RequestException:
        pass
    results = {"anonymous": anon.status_code, "bad_token": bad.status_code,
               "token_without_role": denied.status_code, "token_with_role": allowed.status_code,
               "pages_with_scraper_role": page.status_code}

    # Ten scrapes a second for a minute: a few reviews, not one per scrape.
    load_from = time.time()
    n, deadline = 0, time.monotonic() + 60
    while time.monotonic() < deadline:
        r = exp.get("/metrics")
        assert r.status_code == 200, r.text[:200]
        n += 1
        time.sleep(max(0.0, 0.1 - (time.monotonic() % 0.1)))
    load_reviews = reviews_of(cp, inst.user, load_from)
    assert len(load_reviews) <= 4, [(r["objectRef"]["resource"], r["requestReceivedTimestamp"]) for r in load_reviews]

    # The certificate rotated in place (the kubelet's ..data swap): served without a restart.
    pid = exp.pid
    second = issue(cp.ca_file, ca_key, "captf-lock-exporter")
    assert pem_fingerprint(second[0]) != pem_fingerprint(first[0])
    vol.write(*second)
    t0 = time.monotonic()
    wait_for(lambda: served_fingerprint(exp.port) == pem_fingerprint(second[0]), 30,
             "the rotated certificate served")
    rotated_after = round(time.monotonic() - t0, 1)
    assert exp.pid == pid and exp.returncode() is None
    assert exp.get("/metrics").status_code == 200

    # The health part of the body is rendered beside the scrapes: wait (bounded) for the reload.
    m = wait_metric(exp, lambda m: (m.get("captf_lock_exporter_tls_reloads_total", result="ok") or 0) >= 1,
                    10, "tls_reloads_total{result=ok} to count the rotation")
    assert m.get("captf_lock_exporter_http_auth_total", result="unauthenticated") >= 2
    assert m.get("captf_lock_exporter_http_auth_total", result="forbidden") >= 2
    assert m.get("captf_lock_exporter_http_auth_total", result="allowed") >= n
    assert m.get("captf_lock_exporter_tls_reloads_total", result="ok") >= 1
    reviews_ok = (m.get("captf_lock_exporter_auth_reviews_total", review="token", result="ok")
                  + m.get("captf_lock_exporter_auth_reviews_total", review="access", result="ok"))
    logs = exp.log_text()
    for secret in (prom_token, nobody_token):
        assert secret not in logs, "a bearer token was logged"
    exp.stop()

    # The audit log: reads, and the two reviews, nothing else; every request says who sent it.
    reqs = cp.requests_of(inst.user, since)
    verbs: dict[str, int] = {}
    for r in reqs:
        verbs[r["verb"]] = verbs.get(r["verb"], 0) + 1
        ref = r.get("objectRef") or {}
        if r["verb"] not in ("get", "list", "watch"):
            assert r["verb"] == "create" and ref.get("resource") in REVIEWS, (r["verb"], r["requestURI"])
        assert r.get("userAgent", "").startswith("captf-lock-exporter/"), r.get("userAgent")
    review_calls = len(reviews_of(cp, inst.user, since))
    # The last scrape's counters may be up to a health render (1 s) behind the audit log.
    assert reviews_ok <= review_calls <= reviews_ok + 2, (review_calls, reviews_ok)
    REPORT["endpoint"] = {"status": results, "scrapes_in_60s": n,
                          "review_calls_in_60s_at_10_per_s": len(load_reviews),
                          "review_calls_total": review_calls, "verbs": verbs,
                          "certificate_rotated_served_after_s": rotated_after,
                          "user_agent": reqs[0].get("userAgent") if reqs else None}
    print("endpoint:", json.dumps(REPORT["endpoint"]))
