"""Checks of rendered objects (RBAC, pods, ports, workload, dashboards, rules) for check_chart.py."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from chart_common import (
    AUTH_RULES,
    CLUSTER_READS,
    CLUSTER_SCOPED,
    NAMESPACE,
    RBAC_RESOURCES,
    RBAC_VERBS,
    TLS_DIR,
    UID,
    Fail,
    by_kind,
    expect,
    ident,
    one,
    parsed_groups,
)


# --------------------------------------------------------------------------
# Object checks (each raises Fail)

def check_rbac_rules(rules: list[dict[str, Any]], where: str, want: set[tuple[str, str]] = RBAC_RESOURCES) -> None:
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
    expect(seen == want,
           f"{where}: resources differ from docs/contract.md section 10: extra {sorted(seen - want)}, missing {sorted(want - seen)}")


def check_auth_rules(rules: list[dict[str, Any]], where: str) -> None:
    """Exactly create on tokenreviews and subjectaccessreviews (issue 23), nothing else."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in rules:
        expect(set(r) <= {"apiGroups", "resources", "verbs"},
               f"{where}: rule has {sorted(set(r) - {'apiGroups', 'resources', 'verbs'})} (resourceNames/nonResourceURLs not expected)")
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                expect("*" not in g and "*" not in res, f"{where}: wildcard in {g!r}/{res!r}")
                seen.setdefault((g, res), set()).update(r.get("verbs", []))
    expect(seen == AUTH_RULES, f"{where}: {sorted((k, sorted(v)) for k, v in seen.items())} != create on tokenreviews and subjectaccessreviews only")


def exporter_grants(objs: list[dict[str, Any]], sa_name: str, sa_namespace: str) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) a role bound to the exporter's ServiceAccount grants;
    a non-resource URL or a wildcard fails at once."""
    me = {"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    grants: set[tuple[str, str, str]] = set()
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding") or me not in (b.get("subjects") or []):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], ns, ref["name"]))
        expect(role is not None, f"{ident(b)} binds the exporter to {ref['kind']}/{ref['name']}, which the chart does not render")
        for r in role["rules"]:
            expect("nonResourceURLs" not in r, f"{ident(role)} gives the exporter's ServiceAccount nonResourceURLs {r.get('nonResourceURLs')}")
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        expect("*" not in (g + res + v), f"{ident(role)}: wildcard {g!r}/{res!r}/{v!r}")
                        grants.add((g, res, v))
    return grants


def check_rbac(objs: list[dict[str, Any]], values: dict[str, Any], sa_name: str) -> str:
    """The reads (get/list/watch on the contract's list, per namespace or cluster-wide), the
    review ClusterRole when web.auth.enabled, the reader ClusterRoles (or with web.auth.service
    the reader Roles in the release namespace), and nothing else."""
    namespaces = values.get("watchNamespaces") or []
    crs, crbs = by_kind(objs, "ClusterRole"), by_kind(objs, "ClusterRoleBinding")
    roles, rbs = by_kind(objs, "Role"), by_kind(objs, "RoleBinding")
    if not values["rbac"]["create"]:
        expect(not (crs or crbs or roles or rbs), "rbac.create=false but RBAC objects were rendered")
        return "rbac.create=false: no RBAC objects"
    fullname = one(objs, "Deployment")["metadata"]["name"]
    auth = values["web"]["auth"]["enabled"]
    service = auth and values["web"]["auth"]["service"]
    pages = values["pagesReader"]
    readers = {f"{fullname}-metrics-reader", f"{fullname}-pages-reader"}
    bound_readers = set()
    if values["metricsReader"]["serviceAccounts"]:
        bound_readers.add(f"{fullname}-metrics-reader")
    if pages["users"] or pages["groups"] or pages["serviceAccounts"]:
        bound_readers.add(f"{fullname}-pages-reader")
    want_crs = set() if namespaces else {fullname}
    want_crbs = set(want_crs)
    if auth:
        want_crs.add(f"{fullname}-auth-delegator")
        want_crbs.add(f"{fullname}-auth-delegator")
        if not service:  # the readers on non-resource URLs: ClusterRoles
            want_crs |= readers
            want_crbs |= bound_readers
    got_crs = sorted(o["metadata"]["name"] for o in crs)
    got_crbs = sorted(o["metadata"]["name"] for o in crbs)
    expect(got_crs == sorted(want_crs), f"ClusterRoles {got_crs} != {sorted(want_crs)}")
    expect(got_crbs == sorted(want_crbs), f"ClusterRoleBindings {got_crbs} != {sorted(want_crbs)}")
    # Roles: the reads in each watched namespace; with web.auth.service the readers (on the
    # Service's subresources) in the release namespace.
    want_roles = sorted([(n, fullname) for n in namespaces] + ([(NAMESPACE, n) for n in readers] if service else []))
    want_rbs = sorted([(n, fullname) for n in namespaces] + ([(NAMESPACE, n) for n in bound_readers] if service else []))
    got_roles = sorted((r["metadata"].get("namespace", ""), r["metadata"]["name"]) for r in roles)
    got_rbs = sorted((b["metadata"].get("namespace", ""), b["metadata"]["name"]) for b in rbs)
    expect(got_roles == want_roles, f"Roles (namespace, name) {got_roles} != {want_roles}")
    expect(got_rbs == want_rbs, f"RoleBindings (namespace, name) {got_rbs} != {want_rbs}")
    by_name = {o["metadata"]["name"]: o for o in crs}
    b_by_name = {o["metadata"]["name"]: o for o in crbs}
    if not namespaces:
        pairs = [(by_name[fullname], b_by_name[fullname], "ClusterRole")]
    else:
        pairs = []
        for r in roles:
            if r["metadata"]["name"] != fullname:
                continue
            b = [b for b in rbs if b["metadata"]["namespace"] == r["metadata"]["namespace"] and b["metadata"]["name"] == fullname][0]
            pairs.append((r, b, "Role"))
    if auth:
        name = f"{fullname}-auth-delegator"
        pairs.append((by_name[name], b_by_name[name], "ClusterRole"))
    me = [{"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}]
    for role, binding, kind in pairs:
        if role["metadata"]["name"].endswith("-auth-delegator"):
            check_auth_rules(role["rules"], ident(role))
        else:
            want = RBAC_RESOURCES - CLUSTER_READS if kind == "Role" else RBAC_RESOURCES
            check_rbac_rules(role["rules"], ident(role), want)
        ref = binding["roleRef"]
        expect(ref == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role["metadata"]["name"]},
               f"{ident(binding)}: roleRef {ref} does not name {ident(role)}")
        expect(binding["subjects"] == me, f"{ident(binding)}: subjects {binding['subjects']} != ServiceAccount {NAMESPACE}/{sa_name}")
    # The exporter's rights in the whole render: the reads, the two reviews when auth is on, nothing else.
    grants = exporter_grants(objs, sa_name, NAMESPACE)
    reads = RBAC_RESOURCES - CLUSTER_READS if namespaces else RBAC_RESOURCES
    allowed = {(g, res, v) for g, res in reads for v in RBAC_VERBS}
    if auth:
        allowed |= {(g, res, v) for (g, res), verbs in AUTH_RULES.items() for v in verbs}
    expect(grants == allowed, f"the exporter's ServiceAccount gets extra {sorted(grants - allowed)}, lacks {sorted(allowed - grants)}")
    reviews = "; create on tokenreviews + subjectaccessreviews (ClusterRole)" if auth else "; no reviews (auth off)"
    if service:
        reviews += f"; reader Roles in {NAMESPACE}: {', '.join(sorted(readers))} ({len(bound_readers)} bound)"
    return f"{len(pairs) - (1 if auth else 0)} {'ClusterRole' if not namespaces else 'Role'}(s) get/list/watch, {len(RBAC_RESOURCES)} resources{reviews}"


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
    scheme = "HTTPS" if merged["web"]["tls"]["enabled"] else "HTTP"
    expect(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": scheme},
           f"livenessProbe {c['livenessProbe']['httpGet']} is not {scheme} GET /healthz on metrics")
    expect(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": scheme},
           f"readinessProbe {c['readinessProbe']['httpGet']} is not {scheme} GET /readyz on metrics")
    host = merged["listenHost"]
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    want_args = [f"--listen-address={listen}"]
    if merged["watchNamespaces"]:
        want_args.append("--namespaces=" + ",".join(merged["watchNamespaces"]))
    # a namespaced install cannot read Nodes (cluster-scoped): the chart skips them (issue 49)
    skip = list(dict.fromkeys(merged["skipResources"] + (["nodes"] if merged["watchNamespaces"] else [])))
    if skip:
        want_args.append("--skip-resources=" + ",".join(skip))
    want_args += [f"--log-format={merged['logFormat']}", f"--log-level={merged['logLevel']}"]
    tls = merged["web"]["tls"]
    if not tls["enabled"]:
        want_args.append("--plain-http")
    elif tls["type"] != "selfSigned":  # helm, certManager, existingSecret: a Secret is mounted
        want_args += [f"--tls-cert-file={TLS_DIR}/tls.crt", f"--tls-key-file={TLS_DIR}/tls.key"]
    want_args.append("--auth=" + ("kubernetes" if merged["web"]["auth"]["enabled"] else "none"))
    if merged["web"]["auth"]["enabled"] and merged["web"]["auth"]["audiences"]:
        want_args.append("--auth-audiences=" + ",".join(dict.fromkeys(merged["web"]["auth"]["audiences"])))
    if merged["web"]["auth"]["enabled"] and merged["web"]["auth"]["service"]:
        want_args.append(f"--auth-service={NAMESPACE}/{dep['metadata']['name']}")
    want_args += merged["extraArgs"]
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
        limit = merged["serviceMonitor"]["sampleLimit"]
        expect(sm["spec"].get("sampleLimit", 0) == limit, f"ServiceMonitor sampleLimit {sm['spec'].get('sampleLimit')} != {limit}")
        jl = sm["spec"].get("jobLabel")
        if jl:
            expect(jl in svc["metadata"]["labels"], f"jobLabel {jl} is not a label of the Service")
            notes.append(f"job={svc['metadata']['labels'][jl]}")
    # NetworkPolicy -> pod
    for np_ in by_kind(objs, "NetworkPolicy"):
        expect(np_["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items(), "NetworkPolicy podSelector does not match the pod")
        ing = np_["spec"]["ingress"]
        expect(len(ing) == 1 and [p["port"] for p in ing[0]["ports"]] == ["metrics"], "NetworkPolicy ingress is not the metrics port only")
        extra = merged["networkPolicy"]["ingress"]["from"]
        got = ing[0].get("from", [])
        expect(got[len(got) - len(extra):] == extra, "NetworkPolicy ingress.from does not end with networkPolicy.ingress.from")
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


# --------------------------------------------------------------------------
# Issue 18: high availability defaults and the PrometheusRule from values

RUNBOOK_PREFIX = "https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks"
GRAFANA_PREFIX = "https://grafana.example/"
JOB_MATCHER = 'job=~".*captf-lock-exporter.*"'


def check_availability(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """replicas, the PodDisruptionBudget and the hostname spread as the values ask."""
    dep = one(objs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    pod = dep["spec"]["template"]["spec"]
    expect(dep["spec"]["replicas"] == merged["replicaCount"], f"replicas {dep['spec']['replicas']} != {merged['replicaCount']}")
    pdbs = by_kind(objs, "PodDisruptionBudget")
    want = merged["podDisruptionBudget"]
    notes = [f"{dep['spec']['replicas']} replicas"]
    if want["enabled"]:
        expect(len(pdbs) == 1, f"expected one PodDisruptionBudget, found {len(pdbs)}")
        spec = pdbs[0]["spec"]
        expect(spec["selector"]["matchLabels"].items() <= pod_labels.items(), "PodDisruptionBudget selector does not match the pods")
        key = "maxUnavailable" if want["maxUnavailable"] not in ("", None) else "minAvailable"
        other = "minAvailable" if key == "maxUnavailable" else "maxUnavailable"
        expect(spec.get(key) == want[key] and other not in spec, f"PodDisruptionBudget {spec} != {key}: {want[key]}")
        notes.append(f"PDB {key} {spec[key]}")
    else:
        expect(not pdbs, "podDisruptionBudget.enabled is false but a PodDisruptionBudget was rendered")
    tsc = pod.get("topologySpreadConstraints", [])
    spread = merged["topologySpread"]
    if spread["enabled"]:
        expect(bool(tsc), "no topologySpreadConstraints")
        c = tsc[0]
        expect(c["topologyKey"] == spread["topologyKey"] and c["maxSkew"] == spread["maxSkew"]
               and c["whenUnsatisfiable"] == spread["whenUnsatisfiable"], f"spread constraint {c} != values {spread}")
        sel = c["labelSelector"]["matchLabels"]
        expect(sel.items() <= pod_labels.items() and "app.kubernetes.io/instance" in sel,
               f"spread labelSelector {sel} does not select this release's pods")
        notes.append(f"spread {c['topologyKey']} {c['whenUnsatisfiable']}")
    expect(tsc[1 if spread["enabled"] else 0:] == merged["topologySpreadConstraints"],
           "topologySpreadConstraints from values are not appended as given")
    return ", ".join(notes)


def check_ha_defaults(merged: dict[str, Any]) -> str:
    """The defaults themselves (issue 18): two replicas, a PDB, a hostname spread that never blocks."""
    expect(merged["replicaCount"] == 2, f"default replicaCount {merged['replicaCount']}, want 2")
    pdb = merged.get("podDisruptionBudget") or {}
    expect(pdb.get("enabled") is True and pdb.get("maxUnavailable") == 1,
           f"default podDisruptionBudget {pdb}, want enabled with maxUnavailable 1")
    spread = merged.get("topologySpread") or {}
    expect(spread.get("enabled") is True and spread.get("topologyKey") == "kubernetes.io/hostname"
           and spread.get("whenUnsatisfiable") == "ScheduleAnyway",
           f"default topologySpread {spread}, want kubernetes.io/hostname, ScheduleAnyway")
    return "2 replicas, PDB maxUnavailable 1, hostname spread ScheduleAnyway"


def transform_rule_groups(groups: list[Any], pr: dict[str, Any]) -> list[Any]:
    """The source groups as the values should change them (the template's rules, written again)."""
    out = []
    for g in copy.deepcopy(groups):
        rules = []
        for r in g.get("rules", []):
            if (r.get("alert") or r.get("record")) in pr["disabledRules"]:
                continue
            if isinstance(r.get("expr"), str):
                r["expr"] = r["expr"].replace(JOB_MATCHER, pr["jobSelector"])
            if pr["additionalRuleLabels"]:
                r["labels"] = {**pr["additionalRuleLabels"], **(r.get("labels") or {})}
            if r.get("annotations"):
                ann = {}
                for k, v in r["annotations"].items():
                    if isinstance(v, str):
                        if pr["runbookBaseUrl"]:
                            v = v.replace(RUNBOOK_PREFIX, pr["runbookBaseUrl"].rstrip("/"))
                        if GRAFANA_PREFIX in v:
                            if not pr["grafanaUrl"]:
                                continue
                            v = v.replace(GRAFANA_PREFIX, pr["grafanaUrl"].rstrip("/") + "/")
                    ann[k] = v
                r["annotations"] = ann
            rules.append(r)
        if rules:
            g["rules"] = rules
            out.append(g)
    return out


def compare_transformed_rules(rendered_groups: Any, files: list[Path], merged: dict[str, Any]) -> str:
    """Rendered == the source files changed only as the values ask."""
    want = transform_rule_groups(parsed_groups(files), merged["prometheusRule"])
    if rendered_groups != want:
        for i, (a, b) in enumerate(zip(rendered_groups or [], want)):
            for j, (ra, rb) in enumerate(zip(a.get("rules", []), b.get("rules", []))):
                if ra != rb:
                    raise Fail(f"group {i} rule {j} ({rb.get('alert') or rb.get('record')}) differs:\n"
                               f"  rendered {json.dumps(ra)[:500]}\n  expected {json.dumps(rb)[:500]}")
            if a != b:
                raise Fail(f"group {i} differs: {len(a.get('rules', []))} rendered rules, {len(b.get('rules', []))} expected")
        raise Fail(f"{len(rendered_groups or [])} rendered groups, {len(want)} expected")
    n = sum(len(g["rules"]) for g in want)
    return f"{n} rules = the source's, changed only as the values ask"


def check_rule_values(rendered_groups: list[Any], files: list[Path], merged: dict[str, Any]) -> str:
    """What each value must visibly do, asserted on the render itself."""
    pr = merged["prometheusRule"]
    src = [r for g in parsed_groups(files) for r in g.get("rules", [])]
    rules = [r for g in rendered_groups for r in g.get("rules", [])]
    names = [r.get("alert") or r.get("record") for r in rules]
    for d in pr["disabledRules"]:
        expect(d not in names, f"disabled rule {d} is still rendered")
    expect(len(rules) == len(src) - len(pr["disabledRules"]),
           f"{len(rules)} rules rendered, want {len(src)} - {len(pr['disabledRules'])} disabled")
    # One alert name may have several rules (a severity ladder): pair them by position.
    kept = [s for s in src if (s.get("alert") or s.get("record")) not in pr["disabledRules"]]
    for r, s in zip(rules, kept):
        name = r.get("alert") or r.get("record")
        expect(name == (s.get("alert") or s.get("record")), f"rendered rule {name} where the source has {s.get('alert') or s.get('record')}")
        for k, v in pr["additionalRuleLabels"].items():
            want = (s.get("labels") or {}).get(k, v)
            expect((r.get("labels") or {}).get(k) == want, f"{name}: label {k}={want!r} missing")
        ann = r.get("annotations") or {}
        text = json.dumps(ann)
        expect(GRAFANA_PREFIX not in text, f"{name}: the placeholder {GRAFANA_PREFIX} is left in its annotations")
        if pr["runbookBaseUrl"]:
            expect(RUNBOOK_PREFIX not in text, f"{name}: the project's runbook URL is left although runbookBaseUrl is set")
            if "runbook_url" in ann:
                want = f"{pr['runbookBaseUrl'].rstrip('/')}/{name}.md"
                expect(ann["runbook_url"] == want, f"{name}: runbook_url {ann['runbook_url']}, want {want}")
        if "dashboard_url" in ann:
            expect(bool(pr["grafanaUrl"]) and ann["dashboard_url"].startswith(pr["grafanaUrl"].rstrip("/") + "/d/captf-state-lock-object/"),
                   f"{name}: dashboard_url {ann['dashboard_url']} does not open {pr['grafanaUrl']}'s object dashboard")
        if pr["jobSelector"] != JOB_MATCHER and isinstance(r.get("expr"), str):
            expect(JOB_MATCHER not in r["expr"], f"{name}: {JOB_MATCHER} left in expr although jobSelector is {pr['jobSelector']}")
    with_dash = [r for r in src if GRAFANA_PREFIX in json.dumps(r.get("annotations") or {})]
    rendered_dash = [r for r in rules if "dashboard_url" in (r.get("annotations") or {})]
    if pr["grafanaUrl"]:
        live = [r for r in with_dash if (r.get("alert") or r.get("record")) not in pr["disabledRules"]]
        expect(len(rendered_dash) == len(live), f"{len(rendered_dash)} rules with dashboard_url, want {len(live)}")
    else:
        expect(not rendered_dash, "grafanaUrl is empty but a dashboard_url annotation is rendered")
    templated = sum(1 for r in rules if "{{ $labels" in json.dumps(r.get("annotations") or {}))
    expect(templated > 0, "no Prometheus {{ $labels }} template reached the output")
    return (f"{len(rules)} rules; labels {sorted(pr['additionalRuleLabels'])}, disabled {pr['disabledRules']}, "
            f"{len(rendered_dash)} dashboard_url, runbook {'replaced' if pr['runbookBaseUrl'] else 'as in the file'}, "
            f"job selector {pr['jobSelector']}")


#: docs/captf-rules.md: the marker before the inhibit_rules block the e2e test runs in Alertmanager.
CAPTF_DOC_MARKER = "<!-- captf-inhibit-rules:"


def check_captf_inhibit(objs: list[dict[str, Any]], merged: dict[str, Any], doc: Path) -> str:
    """captfRules.inhibit: one AlertmanagerConfig whose inhibitRules are, matcher for matcher, the
    inhibit_rules block of docs/captf-rules.md (tested in a real Alertmanager by
    tests/e2e/test_captf_rules.py); none when off."""
    found = by_kind(objs, "AlertmanagerConfig")
    if not merged["captfRules"]["inhibit"]:
        expect(not found, f"captfRules.inhibit is off but {len(found)} AlertmanagerConfig rendered")
        return "no AlertmanagerConfig"
    amc = one(objs, "AlertmanagerConfig")
    expect(amc["apiVersion"] == "monitoring.coreos.com/v1alpha1", f"apiVersion {amc['apiVersion']}")
    text = doc.read_text()
    expect(CAPTF_DOC_MARKER in text, f"{doc} has no {CAPTF_DOC_MARKER} block")
    block = re.search(r"```yaml\n(.*?)```", text[text.index(CAPTF_DOC_MARKER):], re.S)
    expect(block is not None, f"no yaml block after the marker in {doc}")
    want = yaml.safe_load(block.group(1))["inhibit_rules"]

    def matchers(ms: list[dict[str, Any]]) -> list[str]:
        return [f'{m["name"]}{m.get("matchType", "=")}"{m.get("value", "")}"' for m in ms]

    got = [{"source_matchers": matchers(r["sourceMatch"]), "target_matchers": matchers(r["targetMatch"]),
            "equal": r["equal"]} for r in amc["spec"]["inhibitRules"]]
    expect(got == want, f"AlertmanagerConfig inhibitRules {got} != docs/captf-rules.md {want}")
    return f"{len(got)} inhibit rules as in {doc.name}"
