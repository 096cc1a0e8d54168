"""Effective lockTimeoutSeconds / activeDeadlineSeconds (docs/contract.md section 2.9, CAPTF effective.go at 2b1fddf4).

A machine or pool: own spec.jobs, else its TerraformCluster's spec.defaults.jobs, else that cluster's
own spec.jobs, else the built-in value, field by field. A TerraformCluster: own spec.jobs, else built-in.
"""

from __future__ import annotations

import pytest

from pykit.builders import capi_cluster, terraform_object
from pykit.exporter import E, Exporter, wait_samples
from pykit.kube import KubeEmulator

NS = "tmo"
TC, TM, TMP = "TerraformCluster", "TerraformMachine", "TerraformMachinePool"


def timeout(kind: str, name: str, value: float | None):
    return E("captf_state_lock_timeout_seconds", value, namespace=NS, kind=kind, name=name)


def deadline(kind: str, name: str, value: float | None):
    return E("captf_state_lock_deadline_seconds", value, namespace=NS, kind=kind, name=name)


@pytest.fixture
def clusters(kube: KubeEmulator) -> KubeEmulator:
    # cl -> tc: defaults.jobs 600 / 7200, own jobs 900
    kube.create(terraform_object(TC, NS, "tc", jobs={"lockTimeoutSeconds": 900},
                                 defaults_jobs={"lockTimeoutSeconds": 600, "activeDeadlineSeconds": 7200},
                                 cluster_label="cl"))
    kube.create(capi_cluster(NS, "cl", "tc"))
    return kube


def test_builtin_default_is_300(kube: KubeEmulator, exporter: Exporter) -> None:
    kube.create(terraform_object(TM, NS, "plain"))
    kube.create(terraform_object(TC, NS, "lonely"))
    wait_samples(exporter, [
        timeout(TM, "plain", 300), deadline(TM, "plain", 3600),
        timeout(TC, "lonely", 300), deadline(TC, "lonely", 3600),
        # per-object series exist for objects that are not locked
        E("captf_state_lock_held", 0, namespace=NS, kind=TM, name="plain"),
        E("captf_state_lock_force_unlocks_total", 0, namespace=NS, kind=TM, name="plain"),
    ], 20, "built-in defaults")


def test_inherits_cluster_defaults_via_capi_cluster(clusters: KubeEmulator, exporter: Exporter) -> None:
    clusters.create(terraform_object(TM, NS, "inherits", cluster_label="cl"))
    clusters.create(terraform_object(TMP, NS, "pool", cluster_label="cl"))
    wait_samples(exporter, [
        timeout(TM, "inherits", 600), deadline(TM, "inherits", 7200),
        timeout(TMP, "pool", 600), deadline(TMP, "pool", 7200),
        # the TerraformCluster itself: its own spec.jobs, not its defaults
        timeout(TC, "tc", 900), deadline(TC, "tc", 3600),
    ], 20, "timeouts inherited through Cluster cl -> TerraformCluster tc")


def test_own_spec_jobs_wins(clusters: KubeEmulator, exporter: Exporter) -> None:
    clusters.create(terraform_object(TM, NS, "own", jobs={"lockTimeoutSeconds": 120}, cluster_label="cl"))
    clusters.create(terraform_object(TM, NS, "zero", jobs={"lockTimeoutSeconds": 0}, cluster_label="cl"))
    wait_samples(exporter, [
        timeout(TM, "own", 120),
        timeout(TM, "zero", 0),  # an explicit 0 counts as set
    ], 20, "own spec.jobs.lockTimeoutSeconds wins")


def test_cluster_own_jobs_are_inherited_last(kube: KubeEmulator, exporter: Exporter) -> None:
    """The TerraformCluster's own spec.jobs is the last inherited layer, under spec.defaults.jobs.

    CAPTF effective.go at 2b1fddf48dd94c167dab2366ff29b3f9c87e4f32: clusterInherited =
    MergeJobPolicy(defaults.Jobs, cluster.Spec.Jobs), and Resolve merges the machine's own spec.jobs over it.
    """
    # issue 7's vector: spec.jobs {150, 1800}, no spec.defaults; the machine has no spec.jobs
    kube.create(terraform_object(TC, NS, "tc2", jobs={"lockTimeoutSeconds": 150, "activeDeadlineSeconds": 1800}))
    kube.create(capi_cluster(NS, "cl2", "tc2"))
    kube.create(terraform_object(TM, NS, "m2", cluster_label="cl2"))
    kube.create(terraform_object(TMP, NS, "p2", cluster_label="cl2"))
    # spec.defaults.jobs sets only the deadline: it wins there, the cluster's own 450 fills the lock timeout
    kube.create(terraform_object(TC, NS, "tc4", jobs={"lockTimeoutSeconds": 450, "activeDeadlineSeconds": 1200},
                                 defaults_jobs={"activeDeadlineSeconds": 7200}))
    kube.create(capi_cluster(NS, "cl4", "tc4"))
    kube.create(terraform_object(TM, NS, "m4", cluster_label="cl4"))
    kube.create(terraform_object(TM, NS, "own4", jobs={"activeDeadlineSeconds": 60}, cluster_label="cl4"))
    wait_samples(exporter, [
        timeout(TM, "m2", 150), deadline(TM, "m2", 1800),
        timeout(TMP, "p2", 150), deadline(TMP, "p2", 1800),
        timeout(TC, "tc2", 150), deadline(TC, "tc2", 1800),
        timeout(TM, "m4", 450), deadline(TM, "m4", 7200),
        timeout(TM, "own4", 450), deadline(TM, "own4", 60),
        # the cluster itself never takes its spec.defaults
        timeout(TC, "tc4", 450), deadline(TC, "tc4", 1200),
    ], 20, "own, then spec.defaults.jobs, then the cluster's own spec.jobs, then built-in")
    # a change of the cluster's own spec.jobs reaches its machines; an explicit 0 is inherited as set
    kube.patch("terraformclusters", NS, "tc2", {"spec": {"jobs": {"lockTimeoutSeconds": 0,
                                                                  "activeDeadlineSeconds": 900}}})
    wait_samples(exporter, [timeout(TM, "m2", 0), deadline(TM, "m2", 900), timeout(TMP, "p2", 0)], 20,
                 "the cluster's new spec.jobs 0 / 900")
    # spec.defaults.jobs appears on tc2 and takes over the fields it sets
    kube.patch("terraformclusters", NS, "tc2", {"spec": {"defaults": {"jobs": {"lockTimeoutSeconds": 75}}}})
    wait_samples(exporter, [timeout(TM, "m2", 75), deadline(TM, "m2", 900)], 20,
                 "defaults 75 over the cluster's own 0; the deadline still from spec.jobs")


def test_label_fallback_without_capi_cluster(kube: KubeEmulator, exporter: Exporter) -> None:
    # no CAPI Cluster cl3: the one TerraformCluster labelled cluster-name=cl3 is used
    kube.create(terraform_object(TC, NS, "tc3", defaults_jobs={"lockTimeoutSeconds": 240}, cluster_label="cl3"))
    kube.create(terraform_object(TM, NS, "m3", cluster_label="cl3"))
    wait_samples(exporter, [timeout(TM, "m3", 240)], 20, "the cluster-name label fallback")
    # a second TerraformCluster with the same label: the fallback is ambiguous, none is used
    kube.create(terraform_object(TC, NS, "tc3b", defaults_jobs={"lockTimeoutSeconds": 222}, cluster_label="cl3"))
    wait_samples(exporter, [timeout(TM, "m3", 300)], 20, "no fallback with two labelled TerraformClusters")
    # a CAPI Cluster cl3 appears: its infrastructureRef decides
    kube.create(capi_cluster(NS, "cl3", "tc3b"))
    wait_samples(exporter, [timeout(TM, "m3", 222)], 20, "the Cluster's infrastructureRef wins")


def test_changes_propagate(clusters: KubeEmulator, exporter: Exporter) -> None:
    clusters.create(terraform_object(TM, NS, "inherits", cluster_label="cl"))
    wait_samples(exporter, [timeout(TM, "inherits", 600)], 20, "inherited 600")
    clusters.patch("terraformclusters", NS, "tc", {"spec": {"defaults": {"jobs": {"lockTimeoutSeconds": 660}}}})
    wait_samples(exporter, [timeout(TM, "inherits", 660)], 20, "the new cluster default 660")
    clusters.patch("terraformmachines", NS, "inherits", {"spec": {"jobs": {"lockTimeoutSeconds": 30}}})
    wait_samples(exporter, [timeout(TM, "inherits", 30)], 20, "the machine's own 30")
    clusters.delete("terraformmachines", NS, "inherits")
    # an object that no longer exists has no effective timeout
    wait_samples(exporter, [timeout(TM, "inherits", None)], 20, "the timeout series gone with the object")


@pytest.mark.kube(omit=["clusters"], add=["clusters.v1beta1"])
def test_inherits_via_capi_v1beta1_cluster(kube: KubeEmulator, exporter: Exporter) -> None:
    """Older CAPI installs serve Cluster only as v1beta1 (infrastructureRef with apiVersion)."""
    kube.create(terraform_object(TC, NS, "tc", defaults_jobs={"lockTimeoutSeconds": 600,
                                                              "activeDeadlineSeconds": 7200}))
    kube.create(capi_cluster(NS, "cl", "tc", version="v1beta1"))
    kube.create(terraform_object(TM, NS, "inherits", cluster_label="cl"))
    wait_samples(exporter, [
        timeout(TM, "inherits", 600), deadline(TM, "inherits", 7200),
        E("captf_lock_exporter_watch_up", 1, resource="clusters"),
    ], 30, "timeouts inherited through a v1beta1 Cluster")
