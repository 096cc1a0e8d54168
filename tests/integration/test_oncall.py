"""On-call tools against kmock's emulator and the demo: the `locks` and `explain` commands (the real
binary, one-shot), and both HTML pages in a real headless browser (Debian's chromium): rows, the
screenshot the README and docs/runbooks/before-you-begin.md show, and hostile holder strings shown
as text with nothing executed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from pykit.builders import create_oncall_locks, lock_info_doc, lock_lease, state_suffix, terraform_object
from pykit.exporter import exporter_bin, run_cli
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
    create_oncall_locks(kube, NS, M)


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
                 "\"$TF\" force-unlock -force -- lock-web-1",
                 f"kubectl get lease -n {NS} lock-tfstate-default-{suffix} -o jsonpath='{{.spec.holderIdentity}}'",
                 "pinned image could not be read, so no command here runs it"]:
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


#: Characters that steer a terminal, a page or a chat instead of being read (contract 7.5)
OSC52_WHO = "x@captf-m-\u001b]52;c;Y3VybCBldmlsfHNo\u0007-apply-a1-h-abcde"
HIDDEN_WHOS = {"osc": OSC52_WHO, "bidi": "alice@lap\u202etop", "zw": "ali\u200bce@laptop"}
HIDDEN = ("\u001b", "\u0007", "\u009b", "\u202e", "\u200b")
EVIL_IMAGE = "evil.example/x@sha256:" + "e" * 64


def hidden_in(text: str) -> list[str]:
    return [repr(c) for c in HIDDEN if c in text]


def test_explain_never_runs_a_tenant_chosen_image_with_the_operators_kubeconfig(kube: KubeEmulator,
                                                                                 tmp_path: Path) -> None:
    """The pinned image comes from data whoever may update Secrets (or the object) in the namespace
    can write. Before: explain printed ``IMAGE=<that image>``, ``docker run "$IMAGE"`` and advised
    mounting ``$HOME/.kube/config`` into it. Now: tofu/terraform on the operator's machine first, the
    image refused with a warning unless --runner-image-repository trusts it, and no kubeconfig mount."""
    obj = terraform_object(M, NS, "web")
    obj["status"]["source"] = {"image": "evil.example/x:v1", "imageDigest": EVIL_IMAGE}
    kube.create(obj)
    kube.create(lock_lease(NS, M, "web", lock_info=lock_info_doc("alice@laptop", lock_id="lock-web-1")))
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    res = run_cli(kc, "explain", "tfm/web", "-n", NS)
    out = res.stdout
    assert res.returncode == 0, res.stderr
    assert "docker run" not in out and "IMAGE=" not in out, out
    assert ".kube/config:" not in out, f"no kubeconfig mounted into any container:\n{out}"
    assert "WARNING: no command here runs the object's pinned image" in out, out
    assert "--runner-image-repository evil.example/x." in out, out
    assert "\"$TF\" force-unlock -force -- lock-web-1" in out, out
    # trusted on purpose: the image runs, with a 10-minute namespaced token and no kubeconfig
    res = run_cli(kc, "explain", "tfm/web", "-n", NS, "--runner-image-repository", "evil.example/x")
    out = res.stdout
    assert res.returncode == 0, res.stderr
    assert f"IMAGE={EVIL_IMAGE}" in out and "WARNING" not in out, out
    assert f"kubectl create token \"$SA\" -n {NS} --duration=10m" in out, out
    assert ".kube/config:" not in out and "config_path=/kube/config" not in out, out
    assert out.index("\"$TF\" force-unlock") < out.index("docker run"), "the local tools come first"
    not_get = [(r.method, r.path) for r in kube.exporter_requests() if r.method != "GET"]
    assert not_get == [], f"non-GET requests: {not_get}"


def test_hidden_characters_never_reach_a_terminal_a_page_or_a_label(kube: KubeEmulator, start_exporter,
                                                                     tmp_path: Path) -> None:
    """OSC 52 (sets the clipboard), a bidi override and a zero-width space in Who: before, explain's
    "Own runner pod" reason printed the OSC 52 sequence raw, and /metrics and `locks -o json` kept
    all three. Now every output shows them escaped (\\u{1b}, contract 7.5)."""
    for name, who in HIDDEN_WHOS.items():
        kube.create(terraform_object(M, NS, name))
        kube.create(lock_lease(NS, M, name, lock_info=lock_info_doc(who, lock_id=f"id-{name}")))
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    for name in HIDDEN_WHOS:
        res = run_cli(kc, "explain", f"tfm/{name}", "-n", NS)
        assert res.returncode == 0, res.stderr
        assert hidden_in(res.stdout + res.stderr) == [], (name, res.stdout)
    res = run_cli(kc, "explain", "tfm/osc", "-n", NS)
    assert "x@captf-m-\\u{1b}]52;c;Y3VybCBldmlsfHNo\\u{7}-apply-a1-h-abcde" in res.stdout, res.stdout
    for fmt in ("table", "wide", "json"):
        res = run_cli(kc, "locks", "-n", NS, "-o", fmt)
        assert hidden_in(res.stdout + res.stderr) == [], (fmt, res.stdout)
    exp = start_exporter()
    for path in ["/", "/metrics"] + [f"/locks/{NS}/{M}/{n}" for n in HIDDEN_WHOS]:
        body = exp.get(path).text
        assert hidden_in(body) == [], (path, body[:2000])
    metrics = exp.get("/metrics").text
    assert 'holder="ali\\\\u{200b}ce@laptop"' in metrics, metrics


def test_force_unlock_takes_a_dash_id_and_the_raw_id_after_double_dash(kube: KubeEmulator,
                                                                        tmp_path: Path) -> None:
    """Go's flag package reads an argument that starts with '-' as a flag, up to `--`. Before:
    ``force-unlock -force -foo`` (tofu: "flag provided but not defined: -foo"). Now every printed
    force-unlock ends its flags with `--`, and an ID with hidden characters is printed as a
    $'...' word that bash reads back byte for byte, while the terminal never receives them."""
    raw = {"dash": "-foo", "esc": "id\u001b]52;c;eA==\u0007'x\\", "bidi": "id\u202e1"}
    for name, hid in raw.items():
        kube.create(terraform_object(M, NS, name))
        kube.create(lock_lease(NS, M, name, holder_identity=hid,
                               lock_info=lock_info_doc("alice@laptop", lock_id=hid)))
    kc = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    for name, hid in raw.items():
        res = run_cli(kc, "explain", f"tfm/{name}", "-n", NS)
        out = res.stdout
        assert res.returncode == 0, res.stderr
        assert hidden_in(out) == [], (name, out)
        lines = [line for line in out.splitlines() if "force-unlock -force" in line]
        assert lines and all("force-unlock -force -- " in line for line in lines), (name, out)
        word = lines[0].split("force-unlock -force -- ", 1)[1].rstrip(")")
        echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, timeout=10)
        assert echoed.stdout == hid.encode(), (name, word, echoed.stdout)
