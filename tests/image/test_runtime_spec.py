"""tools/image/runtime_spec.py without a container: the chart's render translated as the kubelet
would, the seccomp default filtered for no capabilities, and the atomic-writer volume layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykit.chart import render_chart

import runtime_spec


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render_chart({"port": 19820, "listenHost": "127.0.0.1"})


def spec_of(objects: list[dict], tmp_path: Path) -> dict:
    image_config = {"config": {"User": "65532:65532", "Entrypoint": ["/usr/local/bin/captf-lock-exporter"],
                               "Env": ["PATH=/usr/local/bin"]}}
    return runtime_spec.runtime_spec(objects, image_config, hostname="p", sa_volume=tmp_path / "sa",
                                     etc_dir=tmp_path, termination_log=tmp_path / "t",
                                     env={"KUBERNETES_SERVICE_HOST": "127.0.0.1"}, cgroups_path="x")


def test_the_chart_translated(objects: list[dict], tmp_path: Path) -> None:
    _, c = runtime_spec.deployment_container(objects)
    s = spec_of(objects, tmp_path)
    p = s["process"]
    assert p["args"] == ["/usr/local/bin/captf-lock-exporter", *c["args"]]
    assert "--listen-address=127.0.0.1:19820" in p["args"]
    assert (p["user"]["uid"], p["user"]["gid"]) == (65532, 65532)
    assert all(v == [] for v in p["capabilities"].values()), p["capabilities"]
    assert p["noNewPrivileges"] is True
    assert s["root"]["readonly"] is True
    assert s["linux"]["resources"]["memory"]["limit"] == 256 * 2**20
    assert s["linux"]["resources"]["cpu"]["shares"] == 10
    assert "KUBERNETES_SERVICE_HOST=127.0.0.1" in p["env"]
    assert not any(n["type"] == "network" for n in s["linux"]["namespaces"])
    sa = [m for m in s["mounts"] if m["destination"] == runtime_spec.SA_DIR]
    assert sa and "ro" in sa[0]["options"]


def test_seccomp_default_without_capabilities(objects: list[dict], tmp_path: Path) -> None:
    sc = spec_of(objects, tmp_path)["linux"]["seccomp"]
    assert sc["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {n for s in sc["syscalls"] if s["action"] == "SCMP_ACT_ALLOW" for n in s["names"]}
    assert {"read", "write", "epoll_wait", "futex", "socket", "connect"} <= allowed
    # gated on capabilities the container does not have
    for name in ("bpf", "chroot", "init_module", "settimeofday", "kcmp"):
        assert name not in allowed, name


def test_run_as_root_is_refused(objects: list[dict], tmp_path: Path) -> None:
    import copy
    bad = copy.deepcopy(objects)
    (dep,) = [o for o in bad if o["kind"] == "Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0
    with pytest.raises(ValueError, match="runAsNonRoot"):
        spec_of(bad, tmp_path)


def test_atomic_writer_layout(tmp_path: Path) -> None:
    v = runtime_spec.ProjectedVolume(tmp_path / "vol")
    first = v.update({"token": b"one", "namespace": b"ns"})
    assert first.name.startswith("..") and os.readlink(tmp_path / "vol" / "..data") == first.name
    assert os.readlink(tmp_path / "vol" / "token") == "..data/token"
    assert (tmp_path / "vol" / "token").read_bytes() == b"one"
    ino = (tmp_path / "vol" / "token").stat().st_ino
    second = v.update({"token": b"two", "namespace": b"ns"})
    assert not first.exists() and second.exists()
    assert (tmp_path / "vol" / "token").read_bytes() == b"two"
    assert (tmp_path / "vol" / "token").stat().st_ino != ino
    assert sorted(p.name for p in (tmp_path / "vol").iterdir()) == sorted(["..data", second.name, "token", "namespace"])
    assert oct((second / "token").stat().st_mode & 0o777) == oct(0o644)


def test_the_tree_snapshot_sees_a_write(tmp_path: Path) -> None:
    """The root-filesystem comparison of test_container: a rewritten byte (size and time kept), a
    new file, a mode change are each seen."""
    from container import tree
    (tmp_path / "etc").mkdir()
    f = tmp_path / "etc" / "passwd"
    f.write_bytes(b"nonroot:x:65532")
    before = tree(tmp_path)
    st = f.stat()
    f.write_bytes(b"nonroot:x:00000")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert tree(tmp_path)["/etc/passwd"] != before["/etc/passwd"]
    f.write_bytes(b"nonroot:x:65532")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert tree(tmp_path) == before
    (tmp_path / "etc" / "new").write_text("")
    assert "/etc/new" in tree(tmp_path)
    os.chmod(f, 0o600)
    assert tree(tmp_path)["/etc/passwd"] != before["/etc/passwd"]
