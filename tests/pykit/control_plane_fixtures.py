"""pytest plugin (``pytest_plugins = (..., "pykit.control_plane_fixtures")`` in a suite's
conftest.py) for the suites that run a real kube-apiserver + etcd (realkube, realtools, image):
one control plane per session with the CRDs applied (``cp``; a suite that needs more of it
defines its own ``cp``, which takes precedence), its client (``kube``) and the chart's default
install (``install``).
"""

from __future__ import annotations

from typing import Iterator

import pytest

from pykit.chart import Install, install_chart
from pykit.controlplane import ROOT, ControlPlane, Kube

CRDS = ROOT / "tests" / "crds"


@pytest.fixture(scope="session")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    try:
        plane.start()
        plane.kube.apply_crds([CRDS / "terraform.yaml", CRDS / "capi-cluster.yaml"])
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube(cp: ControlPlane) -> Kube:
    assert cp.kube is not None
    return cp.kube


@pytest.fixture(scope="session")
def install(kube: Kube) -> Install:
    """The chart's default install: the exporter's ServiceAccount, ClusterRole and binding."""
    return install_chart(kube, {})
