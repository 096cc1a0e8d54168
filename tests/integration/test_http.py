"""The exporter's HTTP surface: /healthz, /readyz, /metrics content negotiation."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from pykit.builders import CLASSES
from pykit.exporter import OPENMETRICS_CONTENT_TYPE, PROM_ACCEPT, Exporter
from pykit.net import wait_for


def test_healthz_is_200(exporter: Exporter) -> None:
    resp = exporter.get("/healthz")
    assert resp.status_code == 200, resp.text


def test_readyz_becomes_200_once_synced(exporter: Exporter) -> None:
    # every resource is served by the emulator, so every watch can sync
    wait_for(lambda: exporter.get("/readyz").status_code == 200, 20, "/readyz to answer 200")


def test_metrics_default_is_openmetrics(exporter: Exporter) -> None:
    resp = exporter.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers.get("Content-Type") == OPENMETRICS_CONTENT_TYPE
    text = resp.text
    assert text.endswith("# EOF\n") or text.endswith("# EOF"), repr(text[-80:])
    assert text.rstrip("\n").splitlines()[-1] == "# EOF"
    # a strict OpenMetrics parser accepts the whole exposition
    families = {f.name: f for f in parse_openmetrics(text)}
    assert "captf_lock_exporter_build_info" in families, sorted(families)
    build = [s for s in families["captf_lock_exporter_build_info"].samples if s.name.endswith("_info")]
    assert len(build) == 1 and build[0].value == 1 and build[0].labels.get("version"), build


def test_metrics_openmetrics_when_asked(exporter: Exporter) -> None:
    resp = exporter.get("/metrics", headers={
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"})
    assert resp.status_code == 200
    assert resp.headers.get("Content-Type") == OPENMETRICS_CONTENT_TYPE
    assert resp.text.rstrip("\n").splitlines()[-1] == "# EOF"


def test_metrics_prometheus_text_when_asked(exporter: Exporter) -> None:
    resp = exporter.get("/metrics", headers={"Accept": PROM_ACCEPT})
    assert resp.status_code == 200
    ctype = resp.headers.get("Content-Type", "")
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype


def test_overview_series_exist_at_zero_on_empty_cluster(exporter: Exporter) -> None:
    m = exporter.scrape()
    for cls in CLASSES:
        assert m.get("captf_state_locks_held", **{"class": cls}) == 0, (cls, m.all("captf_state_locks_held"))
    assert m.all("captf_state_lock_info") == []
    assert m.get("captf_lock_exporter_build_info") == 1
