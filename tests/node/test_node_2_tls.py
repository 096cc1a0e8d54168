"""What the verified scrape buys (issue 50), on the release test_node.py installed (run after it):

- an impostor, a pod that matches the Service's selector and serves another certificate for the
  same names, is refused by Prometheus (its target down with a certificate error) and never sees
  a request, let alone Prometheus' token;
- the certificate renewed from the same CA (the chart's documented rotation) is served by the
  running replicas without a restart, and both targets stay up throughout.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import yaml

from addons import container_log
from conftest import REPORT, Monitoring
from pykit.controlplane import ROOT
from pykit.net import wait_for
from pykit.node import Node
from pykit.tls import pem_fingerprint, served_fingerprint
from release import (FULLNAME, NS, RELEASE, SERVER_NAME, exporter_targets, ready_pods, tls_secret, values,
                     write_values)


def impostor_pod(image: str) -> dict[str, Any]:
    """A pod with the release's selector labels and a `metrics` port: the Service, and so the
    ServiceMonitor, takes it for a replica. Its certificate names the Service as the real one does."""
    names = ",".join([FULLNAME, f"{FULLNAME}.{NS}", SERVER_NAME, f"{SERVER_NAME}.cluster.local"])
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "impostor", "namespace": NS,
                     "labels": {"app.kubernetes.io/name": "captf-lock-exporter", "app.kubernetes.io/instance": RELEASE}},
        "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "impostor", "image": image, "imagePullPolicy": "IfNotPresent",
                                 "args": ["-listen=:9820", f"-name={names}"],
                                 "ports": [{"name": "metrics", "containerPort": 9820, "protocol": "TCP"}],
                                 "readinessProbe": {"tcpSocket": {"port": "metrics"}, "periodSeconds": 2}}]},
    }


def test_an_impostor_matching_the_selector_is_refused_and_gets_no_token(node: Node, images: dict[str, str],
                                                                       monitoring: Monitoring) -> None:
    node.kubectl("apply", "-f", "-", input=yaml.safe_dump(impostor_pod(images["impostor"])))
    wait_for(lambda: node.pod_ready(NS, "impostor"), 120, "the impostor pod Ready", interval=0.5)
    pod = node.pod(NS, "impostor")

    def refused() -> dict[str, Any] | None:
        for t in exporter_targets(monitoring):
            if t["labels"].get("pod") == "impostor" and t["health"] == "down" and t.get("lastError"):
                return t
        return None
    t = wait_for(refused, 120, "Prometheus' target for the impostor down with an error", interval=1)
    err = t["lastError"]
    assert "x509" in err or "certificate" in err, err
    # the real replicas stay up beside it
    real = [x for x in exporter_targets(monitoring) if x["labels"].get("pod") != "impostor"]
    assert len(real) == 2 and all(x["health"] == "up" for x in real), real

    def handshakes() -> list[dict[str, Any]]:
        evs = [json.loads(line) for line in container_log(node, pod, "impostor") if line.startswith("{")]
        return evs if any(e["event"] == "handshake failed" for e in evs) else []
    evs = wait_for(handshakes, 60, "the impostor's log of a refused handshake", interval=1)
    requests_seen = [e for e in evs if e["event"] == "request"]
    failed = [e for e in evs if e["event"] == "handshake failed"]
    REPORT["impostor"] = {"prometheus_last_error": err, "handshakes_failed": len(failed),
                          "handshake_error": failed[0]["error"], "requests": len(requests_seen),
                          "requests_with_authorization": sum(1 for e in requests_seen if e["authorization"])}
    # Prometheus hung up in the handshake: no request, so no Authorization header, ever reached it
    assert not requests_seen, requests_seen
    node.kubectl("-n", NS, "delete", "pod", "impostor", "--wait=true", "--timeout=60s")
    wait_for(lambda: not [x for x in exporter_targets(monitoring) if x["labels"].get("pod") == "impostor"], 60,
             "the impostor's target gone", interval=1)


def test_a_renewed_certificate_is_served_without_restart_and_targets_stay_up(
        node: Node, images: dict[str, str], monitoring: Monitoring) -> None:
    """The rotation chart/README.md describes for web.tls.type=helm: delete the certificate's Secret
    and `helm upgrade`; the chart makes a new certificate from the CA it keeps."""
    pods = {p["metadata"]["name"]: p for p in ready_pods(node)}
    assert len(pods) == 2
    before = tls_secret(node)
    ips = {n: p["status"]["podIP"] for n, p in pods.items()}
    for n, ip in ips.items():
        assert served_fingerprint(9820, host=ip) == pem_fingerprint(before["tls.crt"]), n
    low = {"samples": 0, "min_up": 2.0, "targets_down": []}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                r = monitoring.query(f'sum(up{{job="captf-lock-exporter",namespace="{NS}"}})')
                low["min_up"] = min(low["min_up"], float(r[0]["value"][1]) if r else 0.0)
                low["samples"] += 1
                low["targets_down"] += [t["lastError"] for t in exporter_targets(monitoring) if t["health"] == "down"]
            except Exception as e:  # noqa: BLE001 - a failed read is recorded, not fatal
                low["targets_down"].append(f"query failed: {e}")
            stop.wait(1)
    th = threading.Thread(target=watch, daemon=True)
    th.start()
    t0 = time.monotonic()
    try:
        node.kubectl("-n", NS, "delete", "secret", f"{FULLNAME}-tls")
        vals = write_values(node, "values-rotate", values(node, images))
        node.helm("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", NS, "-f", str(vals), "--wait", "--timeout", "5m")
        after = tls_secret(node)
        assert after["tls.crt"] != before["tls.crt"], "helm upgrade made no new certificate"
        assert after["ca.crt"] == before["ca.crt"], "the CA changed: Prometheus would distrust the new certificate"
        new = pem_fingerprint(after["tls.crt"])

        def all_serve_new() -> bool:
            return all(served_fingerprint(9820, host=ip) == new for ip in ips.values())
        wait_for(all_serve_new, 180, "both replicas serving the renewed certificate", interval=1)
        served_s = time.monotonic() - t0
        switch = time.time()

        def scraped_after_switch() -> bool:
            ts = exporter_targets(monitoring)
            return len(ts) == 2 and all(t["health"] == "up" and _epoch(t["lastScrape"]) > switch for t in ts)
        wait_for(scraped_after_switch, 60, "both targets scraped up after the switch", interval=1)
    finally:
        stop.set()
        th.join(10)
    now = {p["metadata"]["name"]: p for p in ready_pods(node)}
    assert {n: p["metadata"]["uid"] for n, p in now.items()} == {n: p["metadata"]["uid"] for n, p in pods.items()}, \
        "the replicas were replaced"
    restarts = [c["restartCount"] for p in now.values() for c in p["status"]["containerStatuses"]]
    assert restarts == [0, 0], restarts
    REPORT["rotation"] = {"renewed_certificate_served_after_s": round(served_s, 1), "samples": low["samples"],
                          "min_targets_up": low["min_up"], "restarts": restarts}
    assert low["samples"] >= 5 and low["min_up"] == 2 and not low["targets_down"], low


def _epoch(rfc3339: str) -> float:
    import datetime as dt
    s = rfc3339.replace("Z", "+00:00")
    if "." in s:  # Prometheus writes nanoseconds; Python's fromisoformat takes at most micro
        head, tail = s.split(".", 1)
        frac, _, zone = tail.partition("+")
        s = f"{head}.{frac[:6]}+{zone}" if zone else f"{head}.{frac[:6]}"
    return dt.datetime.fromisoformat(s).timestamp()
