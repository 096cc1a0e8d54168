"""Every kubectl command the project prints outside ``explain`` and the lock page (whose commands
test_runbook.py runs as printed) is run by the real kubectl against the real API server: the
runbook pages (docs/runbooks/*.md) and the README's on-call section (code blocks and inline code),
the alert descriptions in
alerts/, and the chart's NOTES.txt rendered by the Helm engine. Reads run against objects made
for them; writes run with ``--dry-run=server`` (the server admits them, nothing changes); commands
that never exit (``-w``, ``port-forward``) run for a few seconds. An unknown flag, a jsonpath kubectl
cannot parse, or a resource the server does not serve fails the test, naming file and line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from conftest import REPORT
from pykit.builders import lock_lease, pod, runner_pod_name, state_suffix, terraform_object
from pykit.chart import RELEASE, RELEASE_NS
from pykit.controlplane import ROOT, ControlPlane, Kube
from pykit.realtools import Shell

M = "TerraformMachine"
#: kubectl verbs that write: run with --dry-run=server
WRITES = ("patch", "annotate", "label", "taint", "delete", "apply", "create", "replace", "scale", "rollout")
#: what the server answers a well-formed command about an object this test cluster lacks (no
#: kubelet, no exporter Deployment): the command was parsed and its resource is served
SERVER_ANSWERS = (r"Error from server \(NotFound\)", r"No resources found", r"does not have a host assigned",
                  r"pod is not running", r"unable to forward", r"^no$", r"timed out waiting for the condition",
                  # the runbook's undo step on a node that has no out-of-service taint (yet)
                  r"^error: taint \".*\" not found")
#: what a command kubectl cannot run says: never accepted
BROKEN = (r"unknown flag", r"unknown shorthand flag", r"unknown command", r"error parsing jsonpath",
          r"doesn't have a resource type", r"invalid argument", r"unexpected", r"is not a valid",
          r"could not find the requested resource", r"the server could not find")


@dataclass
class Printed:
    where: str  # file:line
    command: str


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` that is outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _complete(cmd: str) -> bool:
    try:
        shlex.split(cmd)
        return True
    except ValueError:
        return False


def logical_lines(text: str, first_line: int) -> list[tuple[int, str]]:
    """Shell lines: backslash continuations and lines inside open quotes joined."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), first_line):
        line = raw if buf else raw.strip()
        if not buf:
            start = n
            line = _strip_comment(line)
        buf = (buf + ("\n" if buf and not buf.endswith(" ") else "") + line) if buf else line
        if buf.endswith("\\"):
            buf = buf[:-1].rstrip() + " "
            continue
        if not _complete(buf):
            continue
        out.append((start, buf.strip()))
        buf = ""
    return out


def doc_sections() -> list[tuple[str, int, str]]:
    """(file, first line, text) of every place that prints commands for people: the README's
    on-call section and every runbook page."""
    readme = (ROOT / "README.md").read_text()
    begin = readme.index("\n## On-call\n") + 1
    end = readme.index("\n## ", begin + 1)
    out = [("README.md", readme[:begin].count("\n") + 1, readme[begin:end])]
    pages = sorted((ROOT / "docs" / "runbooks").glob("*.md"))
    assert len(pages) >= 10, f"only {pages} in docs/runbooks"
    out += [(f"docs/runbooks/{p.name}", 1, p.read_text()) for p in pages]
    return out


def doc_commands() -> list[Printed]:
    found: list[Printed] = []
    for where, offset_line, section in doc_sections():
        found += section_commands(where, offset_line, section)
    return found


def section_commands(where: str, offset_line: int, section: str) -> list[Printed]:
    found: list[Printed] = []
    for m in re.finditer(r"```sh\n(.*?)```", section, re.S):
        line0 = offset_line + section[:m.start(1)].count("\n")
        block = m.group(1)
        if re.search(r"^\s*done$", block, re.M) and "kubectl " in block:
            # a loop: its body's variables come from the loop, so the block runs whole
            found.append(Printed(f"{where}:{line0}", block))
            continue
        for n, cmd in logical_lines(block, line0):
            # a kubectl command, or a variable set from one (HID="$(kubectl ...)")
            if re.match(r"^(kubectl |\w+=\"\$\(kubectl )", cmd):
                found.append(Printed(f"{where}:{n}", cmd))
    prose = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), section, flags=re.S)
    for m in re.finditer(r"`(kubectl [^`]+)`", prose):
        n = offset_line + prose[:m.start()].count("\n")
        cmd = " ".join(m.group(1).split())
        if len(cmd.split()) > 2:  # "`kubectl patch`" names a command, it does not print one
            found.append(Printed(f"{where}:{n}", cmd))
    return found


def alert_commands(values: dict[str, str]) -> list[Printed]:
    path = ROOT / "alerts" / "captf-lock-exporter.rules.yaml"
    text = path.read_text()
    found = []
    for m in re.finditer(r"`(kubectl [^`]+)`", text):
        n = text[:m.start()].count("\n") + 1
        cmd = " ".join(m.group(1).split())
        cmd = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda l: values[l.group(1)], cmd)
        assert "{{" not in cmd, f"alerts/captf-lock-exporter.rules.yaml:{n}: unfilled template in {cmd!r}"
        found.append(Printed(f"alerts/captf-lock-exporter.rules.yaml:{n}", cmd))
    return found


def notes_commands() -> list[Printed]:
    import helm_python as helm
    with helm.Chart.load(ROOT / "chart") as chart:
        rendered = chart.render({}, name=RELEASE, namespace=RELEASE_NS, is_install=True)
    notes = [t for f, t in rendered.items() if f.endswith("NOTES.txt")]
    assert len(notes) == 1, f"the rendered chart has no NOTES.txt: {sorted(rendered)}"
    src = (ROOT / "chart" / "templates" / "NOTES.txt").read_text().splitlines()
    found = []
    for line in notes[0].splitlines():
        s = line.strip()
        if s.startswith("kubectl "):
            verb = next(w for w in s.split()[1:] if not w.startswith("-") and w != RELEASE_NS)
            n = next((i for i, l in enumerate(src, 1) if l.strip().startswith("kubectl ") and verb in l), 0)
            found.append(Printed(f"chart/templates/NOTES.txt:{n}", s))
    return found


def with_dry_run(cmd: str) -> str:
    """``--dry-run=server`` appended when the line's kubectl command writes."""
    try:
        words = shlex.split(cmd)
    except ValueError:
        return cmd
    if "kubectl" not in words:
        return cmd
    rest = words[words.index("kubectl") + 1:]
    j = 0
    while j < len(rest) and rest[j].startswith("-"):
        # -n NS and --namespace NS take the next word; --namespace=NS does not
        j += 2 if rest[j] in ("-n", "--namespace", "--context") else 1
    verb = rest[j] if j < len(rest) else ""
    if verb == "rollout":
        # kubectl 1.36's rollout restart/pause/resume have no --dry-run: they run for real, on the
        # stand-in Deployments the test made (no controller acts on them); undo has one
        verb = "rollout" if rest[j + 1:j + 2] == ["undo"] else ""
    return cmd + " --dry-run=server" if verb in WRITES else cmd


def stand_ins(kube: Kube, ns: str, job: str) -> None:
    """What the printed commands read besides the lock: the object's Job; in captf-system the
    exporter's Deployments (chart and CAPTF's manager) and CAPTF's PrometheusRule captf-alerts
    (through a stand-in CRD: no prometheus-operator here), with CAPTFForceUnlocks at rules/4 as the
    runbooks' JSON patch (docs/runbooks/README.md) tests for."""
    kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json={
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job, "labels": {"captf.infrastructure.cluster.x-k8s.io/owner-name": "web"}},
        "spec": {"activeDeadlineSeconds": 3600, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "runner", "image": "runtime:test"}]}}}})
    for name, labels, container in [
            (RELEASE, {"app.kubernetes.io/name": RELEASE}, "exporter"),
            ("captf-controller-manager", {"control-plane": "controller-manager",
                                          "cluster.x-k8s.io/provider": "infrastructure-terraform"}, "lock-exporter")]:
        kube.request("POST", f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments", ok=(201, 409), json={
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": container, "image": "exporter:test"}]}}}})
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
           "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                    "names": {"plural": "prometheusrules", "singular": "prometheusrule",
                              "kind": "PrometheusRule", "listKind": "PrometheusRuleList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    import tempfile
    import yaml
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(crd, f)
        f.flush()
        kube.apply_crds([Path(f.name)])
    rules = [{"alert": a, "expr": "vector(1)"} for a in
             ("CAPTFJobFailed", "CAPTFDrift", "CAPTFStateUnreadable", "CAPTFApprovalPending", "CAPTFForceUnlocks")]
    kube.request("POST", f"/apis/monitoring.coreos.com/v1/namespaces/{RELEASE_NS}/prometheusrules", ok=(201, 409),
                 json={"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                       "metadata": {"name": "captf-alerts"}, "spec": {"groups": [{"name": "captf", "rules": rules}]}})


def test_every_printed_kubectl_command_runs(cp: ControlPlane, kube: Kube, ns: str, binaries: dict[str, Path],
                                           install, tmp_path: Path) -> None:
    name = "web"
    holder_pod = runner_pod_name(M, name)
    suffix = state_suffix(ns, M, name)
    lease = f"lock-tfstate-default-{suffix}"
    hid = "3442fe8d-2b45-4c6e-9b1a-0e6d1f2a7c55"
    kube.create(terraform_object(M, ns, name))
    kube.create(pod(ns, holder_pod, "Running", kind=M, owner=name))
    kube.create(lock_lease(ns, M, name, who=f"@{holder_pod}", holder_identity=hid))
    kube.request("POST", f"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/terraformplans",
                 json={"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformPlan",
                       "metadata": {"name": "edge-7f3a9"}, "spec": {}}, ok=(201, 422))
    stand_ins(kube, ns, holder_pod.rsplit("-", 1)[0])
    # the lost-node runbook reads and taints the holder's Node: one exists, as on a real cluster
    kube.request("POST", "/api/v1/nodes", ok=(201, 409),
                 json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    admin = cp.kubeconfig(tmp_path / "admin", cp.admin_token, namespace=ns)
    shell = Shell.make(tmp_path / "sh", admin.read_text(), {"kubectl": binaries["kubectl"]})
    env = {"NS": ns, "KIND": M, "NAME": name, "LEASE": lease, "SUFFIX": suffix, "HID": hid,
           "HOLDER_POD": holder_pod, "NODE": "node-1", "PLAN": "edge-7f3a9", "SHORT": "m",
           "SA": f"system:serviceaccount:{RELEASE_NS}:{RELEASE}", "RESOURCE": "leases"}
    placeholders = {"<previous-job>": holder_pod.rsplit("-", 1)[0], "<previous-pod>": holder_pod,
                    "<node-from-wide-output>": "node-1", "<ns>": ns, "<name>": name, "<kind>": "terraformmachine",
                    "<pod>": holder_pod}
    labels = {"namespace": ns, "plan": "edge-7f3a9", "name": name, "kind": M, "holder": f"@{holder_pod}",
              "lock_id": hid, "cluster": ""}
    printed = doc_commands() + alert_commands(labels) + notes_commands()
    assert len(printed) >= 30, f"only {len(printed)} commands found: {printed}"
    failures, ran = [], 0
    for p in printed:
        cmd = p.command
        for k, v in placeholders.items():
            cmd = cmd.replace(k, v)
        assert "<" not in re.sub(r"<<'?EOF'?", "", cmd) or "2>" in cmd, f"{p.where}: unfilled placeholder in {cmd!r}"
        cmd = with_dry_run(cmd)
        endless = any(w in f" {cmd} " for w in (" -w ", " port-forward ", " --watch ", " rollout status "))
        script = f"set -o pipefail\n{'timeout 5 ' if endless else ''}{cmd}"
        r = shell.run(script, env=env, timeout=60)
        ran += 1
        out = (r.stdout + r.stderr).strip()
        if any(re.search(b, out, re.I | re.M) for b in BROKEN):
            failures.append(f"{p.where}: {p.command}\n    ran: {cmd}\n    -> {r.returncode}: {out[:400]}")
        elif r.returncode == 0 or (endless and r.returncode == 124):
            continue
        elif not any(re.search(a, out, re.M | re.I) for a in SERVER_ANSWERS):
            failures.append(f"{p.where}: {p.command}\n    ran: {cmd}\n    -> {r.returncode}: {out[:400]}")
    REPORT["printed_commands_run"] = ran
    assert not failures, f"{len(failures)} of {ran} printed commands kubectl cannot run:\n" + "\n".join(failures)


def test_a_broken_command_is_caught(cp: ControlPlane, kube: Kube, ns: str, binaries: dict[str, Path],
                                    tmp_path: Path) -> None:
    """The checks above can fail: a bad flag, a bad jsonpath and an unserved resource are each
    reported by the real kubectl in a way BROKEN matches (and no SERVER_ANSWERS hides)."""
    admin = cp.kubeconfig(tmp_path / "admin", cp.admin_token, namespace=ns)
    shell = Shell.make(tmp_path / "sh", admin.read_text(), {"kubectl": binaries["kubectl"]})
    for cmd in ["kubectl get lease x --no-such-flag",
                "kubectl get leases -o jsonpath='{.items[0'",
                "kubectl get terraformwidgets"]:
        r = shell.run(cmd)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and any(re.search(b, out, re.I | re.M) for b in BROKEN), (cmd, out)
