"""On-call tools against kmock's emulator and the demo: the `locks` and `explain` commands (the real
binary, one-shot), and both HTML pages in a real headless browser (Debian's chromium): rows, the
screenshot the README and docs/runbooks/before-you-begin.md show, and hostile holder strings shown
as text with nothing executed."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from pykit.builders import lock_info_doc, lock_lease, now_utc, pod, runner_pod_name, state_suffix, terraform_object
from pykit.exporter import exporter_bin
from pykit.kube import KubeEmulator, write_kubeconfig
from pykit.net import free_port

NS = "team-a"
M = "TerraformMachine"
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "img" / "locks-page.png"

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/test.sh installs it)")

HOSTILE = [
    "<script>document.title='pwned'</script>@laptop",
    "\"><img src=x onerror=\"document.title='pwned'\">@host",
    "x" * 3000 + "@long",
    "Jürgen 😀 用户@ordinateur-été",
]


def scenario(kube: KubeEmulator) -> None:
    old = now_utc() - dt.timedelta(seconds=900)
    for n in ["web", "stale", "live"]:
        kube.create(terraform_object(M, NS, n))
    kube.create(lock_lease(NS, M, "web", lock_info=lock_info_doc("alice@laptop", created=old, lock_id="lock-web-1")))
    kube.create(lock_lease(NS, M, "stale", who=f"@{runner_pod_name(M, 'stale', 'apply', 3)}"))
    p_live = runner_pod_name(M, "live")
    kube.create(pod(NS, p_live, "Running", kind=M, owner="live"))
    kube.create(lock_lease(NS, M, "live", who=f"@{p_live}"))


def run_cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "CAPTF_LOCK_EXPORTER_")) and k != "KUBECONFIG"}
    return subprocess.run([exporter_bin(), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_locks_command(kube: KubeEmulator, tmp_path: Path) -> None:
    scenario(kube)
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    res = run_cli(kc, "locks", "-n", NS, "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["name"], r["class"], r["overdue"]) for r in rows] == [
        ("web", "foreign", True), ("stale", "own_stale", False), ("live", "own_live", False)]
    assert rows[0]["lock_id"] == "lock-web-1"
    res = run_cli(kc, "locks", "-A", "--fail-on-overdue")
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines()[0].split()[:4] == ["NAMESPACE", "KIND", "NAME", "CLASS"]
    not_get = [(r.method, r.path) for r in kube.exporter_requests() if r.method != "GET"]
    assert not_get == [], f"non-GET requests: {not_get}"


def test_explain_command(kube: KubeEmulator, tmp_path: Path) -> None:
    scenario(kube)
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    res = run_cli(kc, "explain", "TerraformMachine/web", "-n", NS)
    assert res.returncode == 0, res.stderr
    suffix = state_suffix(NS, M, "web")
    out = res.stdout
    for want in [f"kubectl get lease -n {NS} lock-tfstate-default-{suffix} -o yaml",
                 "the host laptop is not a CAPTF runner pod",
                 f"-backend-config=secret_suffix={suffix} -backend-config=namespace={NS}",
                 "\"$IMAGE\" force-unlock -force lock-web-1",
                 f"kubectl get lease -n {NS} lock-tfstate-default-{suffix} -o jsonpath='{{.spec.holderIdentity}}'",
                 "could not read the pinned image"]:
        assert want in out, f"missing {want!r} in\n{out}"
    assert "kubectl get pod" not in out, f"a workstation host is no pod:\n{out}"
    res = run_cli(kc, "explain", "terraformmachines/stale", "-n", NS)
    assert res.returncode == 0 and "own_stale lock" in res.stdout and "lock ID" in res.stdout, res.stdout + res.stderr
    assert "captf-lock-exporter/reconcile-nudge=\"$(date +%s)\" --overwrite" in res.stdout, res.stdout


def test_explain_an_unknown_lock_whose_lock_info_does_not_parse(kube: KubeEmulator, tmp_path: Path) -> None:
    """The backend's Unlock parses lock-info before it compares IDs, so no force-unlock releases
    this lock: explain prints the guarded patch (test holderIdentity, remove it and lock-info),
    reads nothing it does not need (no pinned image), and still only GETs."""
    kube.create(terraform_object(M, NS, "broken"))
    kube.create(lock_lease(NS, M, "broken", holder_identity="hid-broken",
                           lock_info='{"ID":"id-broken","Who":"alice@laptop","Created":"yesterday"}'))
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    res = run_cli(kc, "explain", "tfm/broken", "-n", NS)
    assert res.returncode == 0, res.stderr
    lease = f"lock-tfstate-default-{state_suffix(NS, M, 'broken')}"
    patch = json.dumps([
        {"op": "test", "path": "/spec/holderIdentity", "value": "hid-broken"},
        {"op": "remove", "path": "/spec/holderIdentity"},
        {"op": "remove", "path": "/metadata/annotations/app.terraform.io~1lock-info"},
    ], separators=(",", ":"))
    out = res.stdout
    assert "unknown lock" in out and "lock-info:     rejected:" in out, out
    assert f"kubectl patch lease -n {NS} {lease} --type=json -p '{patch}'" in out, out
    assert "force-unlock -force" not in out, out
    assert not [r.path for r in kube.exporter_requests() if "/secrets/" in r.path], "no image lookup for this path"
    not_get = [(r.method, r.path) for r in kube.exporter_requests() if r.method != "GET"]
    assert not_get == [], f"non-GET requests: {not_get}"


def chromium(*args: str, tmp: Path) -> str:
    profile = tmp / f"profile-{time.monotonic_ns()}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def dump(url: str, tmp: Path) -> str:
    return chromium("--virtual-time-budget=2000", "--dump-dom", url, tmp=tmp)


class Demo:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = open(tmp / "demo.log", "w")
        self.proc = subprocess.Popen([exporter_bin(), "demo", "--listen-address", f"127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if "prod-md-1" in requests.get(self.url + "/", timeout=2).text:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError("demo did not serve its locks")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@needs_browser
def test_pages_from_the_demo_in_a_browser(tmp_path: Path) -> None:
    demo = Demo(tmp_path)
    try:
        dom = dump(demo.url + "/", tmp_path)
        assert dom.count('class="lock ') >= 5, dom
        assert 'data-class="foreign"' in dom and 'data-class="unknown"' in dom and 'data-class="own_unverified"' in dom
        assert '<table id="watches">' in dom
        shot = tmp_path / "locks.png"
        chromium("--window-size=1400,700", "--hide-scrollbars", f"--screenshot={shot}", demo.url + "/", tmp=tmp_path)
        assert shot.stat().st_size > 10_000
        if os.environ.get("UPDATE_SCREENSHOT"):
            shutil.copy(shot, SCREENSHOT)
        page = dump(demo.url + "/locks/demo/TerraformMachine/prod-md-1", tmp_path)
        assert 'id="lock-timeout-source">its TerraformCluster\'s spec.defaults.jobs<' in page, page
        assert "captf-lock-exporter explain terraformmachine/prod-md-1 -n demo" in page
        filtered = dump(demo.url + "/?class=own_live", tmp_path)
        assert 'data-class="foreign"' not in filtered and 'data-class="own_live"' in filtered
    finally:
        demo.stop()


@needs_browser
def test_hostile_holders_are_text_in_a_browser(kube: KubeEmulator, start_exporter, tmp_path: Path) -> None:
    scenario(kube)
    for i, who in enumerate(HOSTILE):
        kube.create(terraform_object(M, NS, f"evil-{i}"))
        kube.create(lock_lease(NS, M, f"evil-{i}", who=who))
    exp = start_exporter()
    deadline = time.monotonic() + 20
    while "evil-3" not in exp.get("/").text:
        assert time.monotonic() < deadline, "locks did not appear"
        time.sleep(0.2)
    for path in ["/"] + [f"/locks/{NS}/{M}/evil-{i}" for i in range(len(HOSTILE))] + ["/locks/team-a/TerraformMachine/web"]:
        dom = dump(exp.url + path, tmp_path)
        title = dom.split("<title>", 1)[1].split("</title>", 1)[0]
        assert "pwned" not in title, (path, title)
        assert "<script" not in dom.lower(), path
        assert "<img" not in dom.lower(), path
        if path == "/":
            assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;@laptop" in dom
            assert "Jürgen 😀 用户@ordinateur-été" in dom
            assert "x" * 3000 + "@long" in dom or "x" * 100 in dom
            assert 'data-class="foreign"' in dom
    dom = dump(exp.url + f"/locks/{NS}/{M}/evil-1", tmp_path)
    assert "\"&gt;&lt;img src=x onerror=" in dom, dom
