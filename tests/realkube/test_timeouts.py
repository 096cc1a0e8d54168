"""Effective lockTimeoutSeconds / activeDeadlineSeconds through real CAPI Clusters and the CRDs'
validation (docs/contract.md 2.9): inheritance via spec.infrastructureRef (v1beta2, and v1beta1 on
an install that serves only v1beta1), the cluster-name label fallback, and what the schema refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykit.builders import capi_cluster, terraform_object
from pykit.controlplane import ApiError, Kube
from pykit.exporter import E, Exporter, wait_samples

TC, TM, TMP = "TerraformCluster", "TerraformMachine", "TerraformMachinePool"
CRDS = Path(__file__).resolve().parents[1] / "crds"


def timeout(ns: str, kind: str, name: str, value: float | None):
    return E("captf_state_lock_timeout_seconds", value, namespace=ns, kind=kind, name=name)


def deadline(ns: str, kind: str, name: str, value: float | None):
    return E("captf_state_lock_deadline_seconds", value, namespace=ns, kind=kind, name=name)


def test_inheritance_through_capi_cluster_infrastructure_ref(kube: Kube, ns: str, exporter: Exporter) -> None:
    kube.create(terraform_object(TC, ns, "tc", jobs={"lockTimeoutSeconds": 900},
                                 defaults_jobs={"lockTimeoutSeconds": 600, "activeDeadlineSeconds": 7200},
                                 cluster_label="cl"))
    kube.create(capi_cluster(ns, "cl", "tc"))
    stored = kube.get_obj("clusters", ns, "cl")
    assert stored["spec"]["infrastructureRef"] == {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                   "kind": "TerraformCluster", "name": "tc"}
    kube.create(terraform_object(TM, ns, "inherits", cluster_label="cl"))
    kube.create(terraform_object(TMP, ns, "pool", cluster_label="cl"))
    kube.create(terraform_object(TM, ns, "own", jobs={"lockTimeoutSeconds": 120}, cluster_label="cl"))
    kube.create(terraform_object(TM, ns, "zero", jobs={"lockTimeoutSeconds": 0}, cluster_label="cl"))
    kube.create(terraform_object(TM, ns, "plain"))
    wait_samples(exporter, [
        timeout(ns, TM, "inherits", 600), deadline(ns, TM, "inherits", 7200),
        timeout(ns, TMP, "pool", 600), deadline(ns, TMP, "pool", 7200),
        timeout(ns, TC, "tc", 900), deadline(ns, TC, "tc", 3600),
        timeout(ns, TM, "own", 120), timeout(ns, TM, "zero", 0),
        timeout(ns, TM, "plain", 300), deadline(ns, TM, "plain", 3600),
    ], 30, "timeouts inherited through Cluster cl -> TerraformCluster tc")
    # the cluster's own spec.jobs is the last layer (effective.go @2b1fddf4)
    kube.create(terraform_object(TC, ns, "tc4", jobs={"lockTimeoutSeconds": 450, "activeDeadlineSeconds": 1200},
                                 defaults_jobs={"activeDeadlineSeconds": 7200}))
    kube.create(capi_cluster(ns, "cl4", "tc4"))
    kube.create(terraform_object(TM, ns, "m4", cluster_label="cl4"))
    wait_samples(exporter, [timeout(ns, TM, "m4", 450), deadline(ns, TM, "m4", 7200)], 30, "three layers")
    # changes propagate: the Cluster now points at tc4
    kube.patch("clusters", ns, "cl", {"spec": {"infrastructureRef": {"name": "tc4"}}})
    wait_samples(exporter, [timeout(ns, TM, "inherits", 450), deadline(ns, TM, "inherits", 7200)], 30,
                 "the Cluster's new infrastructureRef")
    kube.delete("terraformmachines", ns, "inherits")
    wait_samples(exporter, [timeout(ns, TM, "inherits", None)], 30, "the series gone with the object")


def test_orphaned_cluster_label_fallback(kube: Kube, ns: str, exporter: Exporter) -> None:
    kube.create(terraform_object(TC, ns, "tc3", defaults_jobs={"lockTimeoutSeconds": 240}, cluster_label="cl3"))
    kube.create(terraform_object(TM, ns, "m3", cluster_label="cl3"))
    wait_samples(exporter, [timeout(ns, TM, "m3", 240)], 30, "the cluster-name label fallback")
    kube.create(terraform_object(TC, ns, "tc3b", defaults_jobs={"lockTimeoutSeconds": 222}, cluster_label="cl3"))
    wait_samples(exporter, [timeout(ns, TM, "m3", 300)], 30, "no fallback with two labelled TerraformClusters")
    kube.create(capi_cluster(ns, "cl3", "tc3b"))
    wait_samples(exporter, [timeout(ns, TM, "m3", 222)], 30, "the Cluster's infrastructureRef wins")


def test_crd_schema_refuses_out_of_range_jobs(kube: Kube, ns: str) -> None:
    """The real server validates what kmock accepts: CAPTF's ranges for the two fields."""
    for jobs in ({"lockTimeoutSeconds": 3601}, {"lockTimeoutSeconds": -1}, {"activeDeadlineSeconds": 0},
                 {"activeDeadlineSeconds": 86401}, {"lockTimeoutSeconds": "300"}):
        with pytest.raises(ApiError, match="422"):
            kube.create(terraform_object(TM, ns, "bad", jobs=jobs))
    # unknown fields are kept (x-kubernetes-preserve-unknown-fields), the status subresource exists
    obj = terraform_object(TM, ns, "ok", jobs={"lockTimeoutSeconds": 0, "serviceAccountName": "x"})
    obj["spec"]["source"] = {"image": "registry.example/m:1"}
    out = kube.create(obj)
    assert out["spec"]["jobs"]["serviceAccountName"] == "x" and out["spec"]["source"]["image"]
    assert "status" not in out or "stateSecretSuffix" not in out.get("status", {}), \
        "status is ignored on create with a status subresource"
    kube.patch("terraformmachines", ns, "ok", {"status": {"stateSecretSuffix": "abc"}}, sub="status")
    assert kube.get_obj("terraformmachines", ns, "ok")["status"]["stateSecretSuffix"] == "abc"
    # short names and category are published in discovery
    res = {r["name"]: r for r in kube.get("/apis/infrastructure.cluster.x-k8s.io/v1alpha1").json()["resources"]}
    assert res["terraformclusters"]["shortNames"] == ["tfc"]
    assert res["terraformmachines"]["shortNames"] == ["tfm"]
    assert res["terraformmachinepools"]["shortNames"] == ["tfmp"]
    assert all(res[p]["categories"] == ["cluster-api"] for p in ("terraformclusters", "terraformmachines",
                                                                 "terraformmachinepools"))


def test_inherits_via_v1beta1_only_install(kube: Kube, ns: str, start_exporter) -> None:
    """An older CAPI that serves Cluster only as v1beta1: the exporter finds v1beta2 not served and
    watches v1beta1 (infrastructureRef with apiVersion)."""
    kube.apply_crds([CRDS / "capi-cluster-v1beta1.yaml"])
    try:
        assert kube.get("/apis/cluster.x-k8s.io/v1beta2").status_code == 404
        kube.create(terraform_object(TC, ns, "tc", defaults_jobs={"lockTimeoutSeconds": 600,
                                                                  "activeDeadlineSeconds": 7200}))
        kube.create(capi_cluster(ns, "cl", "tc", version="v1beta1"))
        kube.create(terraform_object(TM, ns, "inherits", cluster_label="cl"))
        exp = start_exporter()
        wait_samples(exp, [timeout(ns, TM, "inherits", 600), deadline(ns, TM, "inherits", 7200),
                           E("captf_lock_exporter_watch_up", 1, resource="clusters")], 30,
                     "timeouts inherited through a v1beta1 Cluster")
        exp.stop()
        kube.delete("clusters.v1beta1", ns, "cl")
    finally:
        kube.apply_crds([CRDS / "capi-cluster.yaml"])
