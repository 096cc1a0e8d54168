"""Issue 23 checks for check_chart.py: who can read the exporter's port.

HTTPS (web.tls.*), the Kubernetes authn/authz of the endpoint (web.auth.*),
the reader ClusterRoles (metricsReader, pagesReader), the NetworkPolicy and
the ServiceMonitor's scheme, token and tlsConfig; each asserted on the
render against the values, plus the secure defaults themselves, NOTES.txt,
and self-tests that feed each check a broken render.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import helm_python as helm

from chart_common import (
    must_fail,
    METRICS_URLS,
    NAMESPACE,
    PAGES_URLS,
    SA_TOKEN_FILE,
    TLS_DIR,
    Fail,
    Runner,
    by_kind,
    expect,
    ident,
    one,
    render,
)
from chart_checks import check_auth_rules, check_rbac
from chart_tls import check_service_monitor_tls, tls_secret_name


def _container(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    dep = one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    return dep, pod, pod["containers"][0]


def _probe_schemes(c: dict[str, Any]) -> list[str]:
    return [c[p]["httpGet"].get("scheme", "HTTP") for p in ("livenessProbe", "readinessProbe")]


def check_web_tls(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """HTTPS unless web.tls.enabled is false; the certificate's Secret (web.tls.type) mounted and passed as both file flags."""
    tls = merged["web"]["tls"]
    _dep, pod, c = _container(objs)
    args = c["args"]
    file_flags = [a for a in args if a.startswith(("--tls-cert-file", "--tls-key-file"))]
    secret_vols = [v for v in pod.get("volumes", []) if "secret" in v]
    if not tls["enabled"]:
        expect("--plain-http" in args, f"web.tls.enabled=false but no --plain-http in {args}")
        expect(not file_flags, f"--plain-http with {file_flags} (the exporter refuses both)")
        expect(_probe_schemes(c) == ["HTTP", "HTTP"], f"plain HTTP but probe schemes {_probe_schemes(c)}")
        expect(not secret_vols and not c.get("volumeMounts"), "plain HTTP but a certificate volume is mounted")
        return "plain HTTP: --plain-http, probes HTTP, no certificate"
    expect("--plain-http" not in args, f"web.tls.enabled but --plain-http in {args}")
    expect(_probe_schemes(c) == ["HTTPS", "HTTPS"], f"TLS on but probe schemes {_probe_schemes(c)}")
    name = tls_secret_name(objs, merged)
    if not name:
        expect(not file_flags, f"web.tls.type {tls['type']} (no Secret) but {file_flags}")
        expect(not secret_vols, f"web.tls.type {tls['type']} (no Secret) but Secret volumes {secret_vols}")
        return "HTTPS with the self-signed certificate, probes HTTPS"
    vols = [v for v in secret_vols if v["secret"].get("secretName") == name]
    expect(len(vols) == 1, f"Secret {name} is not one pod volume: {pod.get('volumes')}")
    mounts = [m for m in c.get("volumeMounts", []) if m["name"] == vols[0]["name"]]
    expect(len(mounts) == 1, f"volume {vols[0]['name']} is not mounted once in the exporter: {c.get('volumeMounts')}")
    m = mounts[0]
    expect(m.get("readOnly") is True, "the certificate is not mounted readOnly")
    expect("subPath" not in m and "subPathExpr" not in m, "the certificate is mounted with subPath: a renewal would never reach it")
    expect(m["mountPath"] == TLS_DIR, f"mountPath {m['mountPath']} != {TLS_DIR}")
    want = [f"--tls-cert-file={TLS_DIR}/tls.crt", f"--tls-key-file={TLS_DIR}/tls.key"]
    expect(file_flags == want, f"file flags {file_flags} != {want}")
    return f"HTTPS from Secret {name} ({tls['type']}) at {TLS_DIR} (read-only, no subPath), probes HTTPS"


def _grants_reviews(o: dict[str, Any]) -> bool:
    return any(res in ("tokenreviews", "subjectaccessreviews") for r in o.get("rules", []) for res in r.get("resources", []))


def check_web_auth(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """--auth=kubernetes with the review ClusterRole, or --auth=none and no review rights at all."""
    _dep, pod, c = _container(objs)
    auth = merged["web"]["auth"]["enabled"]
    flags = [a for a in c["args"] if a.startswith("--auth=")]
    want = "--auth=kubernetes" if auth else "--auth=none"
    expect(flags == [want], f"auth flags {flags} != [{want}]")
    # --auth-service names the chart's own Service, in the release namespace, and only with auth on.
    svc = one(objs, "Service")["metadata"]
    service_flags = [a for a in c["args"] if a.startswith("--auth-service")]
    want_service = [f"--auth-service={NAMESPACE}/{_dep['metadata']['name']}"] if auth and merged["web"]["auth"]["service"] else []
    expect(service_flags == want_service, f"--auth-service flags {service_flags} != {want_service}")
    if want_service:
        expect(f"{svc.get('namespace')}/{svc['name']}" == want_service[0].split("=", 1)[1],
               f"{want_service[0]} does not name the rendered Service {svc.get('namespace')}/{svc['name']}")
    reviewers = [o for o in objs if o["kind"] in ("Role", "ClusterRole") and _grants_reviews(o)]
    if not auth:
        expect(not reviewers, f"--auth=none but {[ident(o) for o in reviewers]} grant the reviews")
        return "--auth=none, no review ClusterRole"
    if not merged["rbac"]["create"]:
        expect(not reviewers, "rbac.create=false but review rules rendered")
        return "--auth=kubernetes; rbac.create=false: the reviews granted elsewhere"
    expect([o["kind"] for o in reviewers] == ["ClusterRole"], f"review rules in {[ident(o) for o in reviewers]}, want one ClusterRole")
    check_auth_rules(reviewers[0]["rules"], ident(reviewers[0]))
    sa = {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    bound = [b for b in by_kind(objs, "ClusterRoleBinding") if b["roleRef"]["name"] == reviewers[0]["metadata"]["name"]]
    expect(len(bound) == 1 and bound[0]["subjects"] == [sa], f"{ident(reviewers[0])} is not bound to exactly {sa}")
    return (f"--auth=kubernetes{' ' + want_service[0] if want_service else ''}; "
            f"{ident(reviewers[0])} create tokenreviews+subjectaccessreviews, bound to the exporter")


def _reader_subjects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    subs = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u} for u in spec.get("users", [])]
    subs += [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g} for g in spec.get("groups", [])]
    subs += [{"kind": "ServiceAccount", "name": s["name"], "namespace": s["namespace"]} for s in spec.get("serviceAccounts", [])]
    return subs


def _is_reader(o: dict[str, Any]) -> bool:
    """A role granting a path: a non-resource URL, or a subresource of a Service (--auth-service)."""
    return o["kind"] in ("Role", "ClusterRole") and any(
        "nonResourceURLs" in r or any(res.startswith("services/") for res in r.get("resources", [])) for r in o["rules"])


def check_readers(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """<fullname>-metrics-reader: exactly get on /metrics, bound to metricsReader.serviceAccounts;
    <fullname>-pages-reader: exactly get on / and /locks/*, bound to pagesReader's subjects.
    ClusterRoles on non-resource URLs, or with web.auth.service Roles in the release namespace
    on services/metrics and services/pages of the chart's Service, and then no non-resource URL."""
    fullname = one(objs, "Deployment")["metadata"]["name"]
    reader_roles = [o for o in objs if _is_reader(o)]
    if not (merged["web"]["auth"]["enabled"] and merged["rbac"]["create"]):
        expect(not reader_roles, f"auth or RBAC off but {[ident(o) for o in reader_roles]} rendered")
        return "no reader roles (auth or rbac.create off)"
    service = merged["web"]["auth"]["service"]
    kind, ns = ("Role", NAMESPACE) if service else ("ClusterRole", "")
    svc = one(objs, "Service")["metadata"]
    if service:
        expect(svc["name"] == fullname and svc.get("namespace") == NAMESPACE,
               f"the reader Roles name Service {fullname} in {NAMESPACE}, the chart renders {svc.get('namespace')}/{svc['name']}")
    notes = [f"{kind}s" + (f" in {ns} on services/metrics, services/pages of {fullname}" if service else " on non-resource URLs")]
    rules = {f"{fullname}-metrics-reader": ([{"apiGroups": [""], "resources": ["services/metrics"], "resourceNames": [fullname], "verbs": ["get"]}]
                                            if service else [{"nonResourceURLs": METRICS_URLS, "verbs": ["get"]}]),
             f"{fullname}-pages-reader": ([{"apiGroups": [""], "resources": ["services/pages"], "resourceNames": [fullname], "verbs": ["get"]}]
                                          if service else [{"nonResourceURLs": PAGES_URLS, "verbs": ["get"]}])}
    subjects = {f"{fullname}-metrics-reader": _reader_subjects(merged["metricsReader"]),
                f"{fullname}-pages-reader": _reader_subjects(merged["pagesReader"])}
    got = sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in reader_roles)
    want = sorted((kind, ns, name) for name in rules)
    expect(got == want, f"reader roles (kind, namespace, name) {got} != {want}")
    for name, want_rules in rules.items():
        role = [o for o in reader_roles if o["metadata"]["name"] == name][0]
        expect(role["rules"] == want_rules, f"{ident(role)} rules {role['rules']} != {want_rules}")
        bindings = [b for b in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding") if b["roleRef"]["name"] == name]
        if not subjects[name]:
            expect(not bindings, f"no subjects in values, yet {[ident(b) for b in bindings]} bind {name}")
            notes.append(f"{name} unbound")
            continue
        expect(len(bindings) == 1 and bindings[0]["kind"] == f"{kind}Binding" and bindings[0]["metadata"].get("namespace", "") == ns,
               f"{name}: bindings {[ident(b) for b in bindings]}, want one {kind}Binding" + (f" in {ns}" if ns else ""))
        b = bindings[0]
        expect(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}, f"{ident(b)} roleRef {b['roleRef']}")
        expect(b["subjects"] == subjects[name], f"{ident(b)} subjects {b['subjects']} != the values' {subjects[name]}")
        notes.append(f"{name} -> {', '.join(s['kind'] + ':' + s.get('namespace', '') + '/' + s['name'] for s in subjects[name])}")
    return "; ".join(notes)


def _selector_set(sel: Any) -> bool:
    return isinstance(sel, dict) and bool(sel.get("matchLabels") or sel.get("matchExpressions"))


def want_peers(np_values: dict[str, Any]) -> list[dict[str, Any]]:
    ing = np_values["ingress"]
    peers = []
    if _selector_set(ing.get("namespaceSelector")):
        peer = {"namespaceSelector": ing["namespaceSelector"]}
        if _selector_set(ing.get("podSelector")):
            peer["podSelector"] = ing["podSelector"]
        peers.append(peer)
    return peers + list(ing.get("from") or [])


def check_network_policy(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """Ingress: the metrics port only, from the namespace selector (and podSelector) plus the extra peers, never from any source."""
    np_values = merged["networkPolicy"]
    nps = by_kind(objs, "NetworkPolicy")
    if not np_values["enabled"]:
        expect(not nps, "networkPolicy.enabled=false but a NetworkPolicy was rendered")
        return "no NetworkPolicy (disabled)"
    expect(len(nps) == 1, f"{len(nps)} NetworkPolicies")
    spec = nps[0]["spec"]
    expect(spec["policyTypes"] == ["Ingress", "Egress"], f"policyTypes {spec['policyTypes']}")
    ing = spec.get("ingress", [])
    expect(len(ing) == 1, f"{len(ing)} ingress rules, want one")
    expect(ing[0]["ports"] == [{"protocol": "TCP", "port": "metrics"}], f"ingress ports {ing[0]['ports']} != TCP metrics only")
    peers = ing[0].get("from")
    expect(bool(peers), "ingress rule without `from`: any source may reach the port")
    expect(all(p for p in peers), f"an empty peer in {peers} matches every pod of the policy's namespace")
    want = want_peers(np_values)
    expect(peers == want, f"ingress from {peers} != {want}")
    eg = spec["egress"]
    expect(eg[0]["ports"] == [{"protocol": "TCP", "port": p} for p in np_values["egress"]["apiServerPorts"]], "egress API server ports")
    return f"metrics port from {peers}"


def check_service_monitor_security(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """scheme https with TLS; the bearer token (file or Secret) with auth; tlsConfig: the CA and serverName, or insecureSkipVerify."""
    sms = by_kind(objs, "ServiceMonitor")
    if not sms:
        return "no ServiceMonitor"
    sm_values = merged["serviceMonitor"]
    tls, auth = merged["web"]["tls"]["enabled"], merged["web"]["auth"]["enabled"]
    ep = one(sms, "ServiceMonitor")["spec"]["endpoints"][0]
    expect(ep["scheme"] == ("https" if tls else "http"), f"scheme {ep['scheme']} with web.tls.enabled={tls}")
    expect(not {"bearerTokenSecret", "basicAuth", "oauth2"} & set(ep), f"unexpected credentials {sorted({'bearerTokenSecret', 'basicAuth', 'oauth2'} & set(ep))}")
    creds = sm_values["authorization"]["credentials"]
    notes = [ep["scheme"]]
    if not auth:
        expect("authorization" not in ep and "bearerTokenFile" not in ep, "--auth=none, yet the ServiceMonitor sends a token")
        notes.append("no token")
    elif creds:
        expect(ep.get("authorization") == {"type": "Bearer", "credentials": creds}, f"authorization {ep.get('authorization')} != Bearer {creds}")
        expect("bearerTokenFile" not in ep, "both authorization and bearerTokenFile")
        notes.append(f"Bearer from Secret {creds['name']}/{creds['key']}")
    else:
        expect(ep.get("bearerTokenFile") == SA_TOKEN_FILE, f"bearerTokenFile {ep.get('bearerTokenFile')} != {SA_TOKEN_FILE}")
        expect("authorization" not in ep, "both authorization and bearerTokenFile")
        notes.append("Prometheus' ServiceAccount token file")
    if not tls:
        expect("tlsConfig" not in ep, "plain HTTP with a tlsConfig")
    else:
        notes.append(check_service_monitor_tls(objs, merged))
    return ", ".join(notes)


def check_secure_defaults(objs: list[dict[str, Any]], merged: dict[str, Any]) -> str:
    """The defaults themselves: without these the checks above would pass an insecure default."""
    _dep, _pod, c = _container(objs)
    expect(merged["web"]["tls"]["enabled"] is True and merged["web"]["auth"]["enabled"] is True,
           f"default web {merged.get('web')}, want TLS and auth on")
    expect("--plain-http" not in c["args"] and "--auth=kubernetes" in c["args"], f"default args {c['args']}")
    expect(_probe_schemes(c) == ["HTTPS", "HTTPS"], f"default probe schemes {_probe_schemes(c)}")
    expect(any(_grants_reviews(o) for o in by_kind(objs, "ClusterRole")), "no review ClusterRole by default")
    np_values = merged["networkPolicy"]
    expect(np_values["enabled"] is True, "networkPolicy off by default")
    expect(want_peers(np_values) == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
           f"default ingress peers {want_peers(np_values)}, want the monitoring namespace only")
    expect(len(by_kind(objs, "NetworkPolicy")) == 1, "no NetworkPolicy in the default render")
    sm = merged["serviceMonitor"]
    expect(not sm["authorization"]["credentials"] and sm["bearerTokenFile"] == SA_TOKEN_FILE,
           "default ServiceMonitor credentials")
    expect(merged["web"]["tls"]["type"] == "helm" and sm["tlsConfig"] == {},
           f"default web.tls.type {merged['web']['tls']['type']} / tlsConfig {sm['tlsConfig']}: want helm (a CA Prometheus verifies)")
    expect(merged["metricsReader"]["serviceAccounts"] == [], "a default scraper binding (the chart cannot know your Prometheus)")
    return "HTTPS (Helm-made CA), --auth=kubernetes, probes HTTPS, review ClusterRole, NetworkPolicy from namespace monitoring only"


def _notes(chart_dir: Path, values: dict[str, Any]) -> str:
    out = render(chart_dir, values)
    return next(v for k, v in out.items() if k.endswith("NOTES.txt"))


def check_notes(chart_dir: Path) -> str:
    """How to scrape by hand, and a warning exactly when TLS or auth is off."""
    d = _notes(chart_dir, {})
    for need in ("create token <serviceaccount>", 'curl -sk -H "Authorization: Bearer $TOKEN" https://127.0.0.1:9820/metrics',
                 "set metricsReader.serviceAccounts", "captf-lock-exporter-metrics-reader"):
        expect(need in d, f"default NOTES lack {need!r}")
    expect("WARNING" not in d, "the default NOTES warn")
    plain = _notes(chart_dir, {"web": {"tls": {"enabled": False}}})
    expect("WARNING: web.tls.enabled=false" in plain and "http://127.0.0.1" in plain and "WARNING: web.auth" not in plain,
           "NOTES with web.tls.enabled=false: no TLS warning or not http://")
    noauth = _notes(chart_dir, {"web": {"auth": {"enabled": False}}})
    expect("WARNING: web.auth.enabled=false" in noauth and "Authorization: Bearer" not in noauth and "WARNING: web.tls" not in noauth,
           "NOTES with web.auth.enabled=false: no auth warning, or a token still asked for")
    bound = _notes(chart_dir, {"metricsReader": {"serviceAccounts": [{"name": "prometheus-k8s", "namespace": "monitoring"}]}})
    expect("serviceaccount monitoring/prometheus-k8s" in bound and "set metricsReader.serviceAccounts" not in bound,
           "NOTES do not name the bound scraper")
    return "scrape-by-hand commands; TLS and auth warnings only when off; the scraper binding named"


def check_no_peer_fails(chart_dir: Path) -> str:
    """A NetworkPolicy with no peer would let any source in: the install fails instead; an explicit all-namespaces peer works."""
    try:
        render(chart_dir, {"networkPolicy": {"ingress": {"namespaceSelector": None, "from": []}}})
    except helm.HelmError as e:
        expect("networkPolicy.ingress" in str(e), f"failed, but not naming networkPolicy.ingress: {e}")
    else:
        raise Fail("namespaceSelector null and from [] rendered (a NetworkPolicy open to any source)")
    objs_ok = render(chart_dir, {"networkPolicy": {"ingress": {"namespaceSelector": None, "from": [{"namespaceSelector": {}}]}}})
    expect(any("NetworkPolicy" in v for v in objs_ok.values()), "from: [{namespaceSelector: {}}] rendered no NetworkPolicy")
    return "no peer: install fails naming networkPolicy.ingress; from [{namespaceSelector: {}}] renders"


OBJECT_CHECKS: dict[str, Callable[[list[dict[str, Any]], dict[str, Any]], str]] = {
    "HTTPS, probes and the certificate Secret from web.tls": check_web_tls,
    "--auth and the review ClusterRole from web.auth": check_web_auth,
    "metrics-reader / pages-reader roles (ClusterRoles, or Roles with web.auth.service) exact and bound as the values say": check_readers,
    "NetworkPolicy: the metrics port only, from the selector and the extra peers": check_network_policy,
    "ServiceMonitor scheme, bearer token and tlsConfig from web.* and serviceMonitor.*": check_service_monitor_security,
}


def security_self_tests(objs: list[dict[str, Any]], merged: dict[str, Any], r: Runner) -> None:
    """Each new check must reject a broken render (objs/merged: a variant with TLS from a Secret, a CA, auth and readers)."""
    def mutate(f: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
        o = copy.deepcopy(objs)
        f(o)
        return o

    def c(o: list[dict[str, Any]]) -> dict[str, Any]:
        return _container(o)[2]

    def role(o: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
        return [x for x in by_kind(o, "ClusterRole") if x["metadata"]["name"].endswith(suffix)][0]

    def ep(o: list[dict[str, Any]]) -> dict[str, Any]:
        return one(o, "ServiceMonitor")["spec"]["endpoints"][0]

    def run() -> str:
        for name, fn in OBJECT_CHECKS.items():
            fn(objs, merged)  # the unbroken render must pass, or the cases prove nothing
        sa = _container(objs)[1]["serviceAccountName"]
        check_rbac(objs, merged, sa)
        cases: dict[str, Callable[[], Any]] = {
            "--plain-http added": lambda: check_web_tls(mutate(lambda o: c(o)["args"].append("--plain-http")), merged),
            "probe scheme HTTP": lambda: check_web_tls(mutate(lambda o: c(o)["readinessProbe"]["httpGet"].update(scheme="HTTP")), merged),
            "certificate via subPath": lambda: check_web_tls(mutate(lambda o: c(o)["volumeMounts"][0].update(subPath="tls.crt")), merged),
            "key flag missing": lambda: check_web_tls(mutate(lambda o: c(o)["args"].remove(f"--tls-key-file={TLS_DIR}/tls.key")), merged),
            "--auth=none": lambda: check_web_auth(mutate(lambda o: c(o)["args"].__setitem__(c(o)["args"].index("--auth=kubernetes"), "--auth=none")), merged),
            "review role also gets secrets": lambda: check_web_auth(mutate(lambda o: role(o, "-auth-delegator")["rules"].append(
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})), merged),
            "review verb get": lambda: check_auth_rules([{**x, "verbs": ["create", "get"]} for x in role(objs, "-auth-delegator")["rules"]], "t"),
            "exporter bound to pages-reader": lambda: check_rbac(mutate(lambda o: [b for b in by_kind(o, "ClusterRoleBinding")
                if b["metadata"]["name"].endswith("-pages-reader")][0]["subjects"].append(
                {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE})), merged, sa),
            "metrics-reader also /": lambda: check_readers(mutate(lambda o: role(o, "-metrics-reader")["rules"][0]["nonResourceURLs"].append("/")), merged),
            "metrics-reader verb list": lambda: check_readers(mutate(lambda o: role(o, "-metrics-reader")["rules"][0]["verbs"].append("list")), merged),
            "metrics-reader bound to someone else": lambda: check_readers(mutate(lambda o: [b for b in by_kind(o, "ClusterRoleBinding")
                if b["metadata"]["name"].endswith("-metrics-reader")][0]["subjects"][0].update(name="default")), merged),
            "NetworkPolicy extra port": lambda: check_network_policy(mutate(lambda o: one(o, "NetworkPolicy")["spec"]["ingress"][0]["ports"].append(
                {"protocol": "TCP", "port": 8080})), merged),
            "NetworkPolicy from any source": lambda: check_network_policy(mutate(lambda o: one(o, "NetworkPolicy")["spec"]["ingress"][0].pop("from")), merged),
            "NetworkPolicy empty peer": lambda: check_network_policy(mutate(lambda o: one(o, "NetworkPolicy")["spec"]["ingress"][0]["from"].append({})), merged),
            "ServiceMonitor http": lambda: check_service_monitor_security(mutate(lambda o: ep(o).update(scheme="http")), merged),
            "ServiceMonitor without token": lambda: check_service_monitor_security(mutate(lambda o: ep(o).pop("authorization")), merged),
            "ServiceMonitor skips verification despite a CA": lambda: check_service_monitor_security(mutate(lambda o: ep(o)["tlsConfig"].update(insecureSkipVerify=True)), merged),
            "ServiceMonitor without serverName": lambda: check_service_monitor_security(mutate(lambda o: ep(o)["tlsConfig"].pop("serverName")), merged),
        }
        failed = [n for n, fn in cases.items() if not must_fail(fn)]
        expect(not failed, f"checks accepted broken input: {failed}")
        return f"{len(cases)} broken inputs rejected"
    r.run("self-test: the issue 23 checks reject broken input", run)


def auth_service_self_tests(objs: list[dict[str, Any]], merged: dict[str, Any],
                            off_objs: list[dict[str, Any]], off_merged: dict[str, Any], r: Runner) -> None:
    """The web.auth.service checks must reject a broken render (objs/merged: web.auth.service with every
    reader bound; off_objs/off_merged: web.auth.service with web.auth.enabled false)."""
    def mutate(f: Callable[[list[dict[str, Any]]], None], base: list[dict[str, Any]] = objs) -> list[dict[str, Any]]:
        o = copy.deepcopy(base)
        f(o)
        return o

    def args(o: list[dict[str, Any]]) -> list[str]:
        return _container(o)[2]["args"]

    def flag_at(o: list[dict[str, Any]]) -> int:
        return [i for i, a in enumerate(args(o)) if a.startswith("--auth-service=")][0]

    def named(o: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
        return [x for x in by_kind(o, kind) if x["metadata"]["name"].endswith(suffix)][0]

    def to_cluster_role(o: list[dict[str, Any]]) -> None:
        role = named(o, "Role", "-metrics-reader")
        role["kind"] = "ClusterRole"
        role["metadata"].pop("namespace")
        b = named(o, "RoleBinding", "-metrics-reader")
        b["kind"] = "ClusterRoleBinding"
        b["metadata"].pop("namespace")
        b["roleRef"]["kind"] = "ClusterRole"

    def run() -> str:
        sa = _container(objs)[1]["serviceAccountName"]
        for fn in OBJECT_CHECKS.values():
            fn(objs, merged)  # the unbroken renders must pass, or the cases prove nothing
            fn(off_objs, off_merged)
        check_rbac(objs, merged, sa)
        fullname = one(objs, "Deployment")["metadata"]["name"]
        url_reader = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": f"{fullname}-url-reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
        cases: dict[str, Callable[[], Any]] = {
            "--auth-service left out": lambda: check_web_auth(mutate(lambda o: args(o).pop(flag_at(o))), merged),
            "--auth-service in another namespace": lambda: check_web_auth(mutate(lambda o: args(o).__setitem__(
                flag_at(o), f"--auth-service=default/{fullname}")), merged),
            "--auth-service naming another Service": lambda: check_web_auth(mutate(lambda o: args(o).__setitem__(
                flag_at(o), f"--auth-service={NAMESPACE}/kubernetes")), merged),
            "--auth-service with web.auth.enabled false": lambda: check_web_auth(mutate(
                lambda o: args(o).append(f"--auth-service={NAMESPACE}/{fullname}"), off_objs), off_merged),
            "metrics-reader on another Service": lambda: check_readers(mutate(lambda o: named(o, "Role", "-metrics-reader")["rules"][0].update(
                resourceNames=["kubernetes"])), merged),
            "metrics-reader on every Service": lambda: check_readers(mutate(lambda o: named(o, "Role", "-metrics-reader")["rules"][0].pop(
                "resourceNames")), merged),
            "metrics-reader on services/proxy": lambda: check_readers(mutate(lambda o: named(o, "Role", "-metrics-reader")["rules"][0].update(
                resources=["services/proxy"])), merged),
            "pages-reader verb list": lambda: check_readers(mutate(lambda o: named(o, "Role", "-pages-reader")["rules"][0]["verbs"].append(
                "list")), merged),
            "metrics-reader a ClusterRole": lambda: check_readers(mutate(to_cluster_role), merged),
            "metrics-reader Role in another namespace": lambda: check_readers(mutate(lambda o: named(o, "Role", "-metrics-reader")["metadata"].update(
                namespace="default")), merged),
            "metrics-reader bound to someone else": lambda: check_readers(mutate(lambda o: named(o, "RoleBinding", "-metrics-reader")["subjects"][0].update(
                name="default")), merged),
            "pages-reader RoleBinding in another namespace": lambda: check_readers(mutate(lambda o: named(o, "RoleBinding", "-pages-reader")["metadata"].update(
                namespace="default")), merged),
            "a non-resource-URL reader ClusterRole beside": lambda: check_readers(mutate(lambda o: o.append(copy.deepcopy(url_reader))), merged),
            "a non-resource-URL reader ClusterRole beside (RBAC)": lambda: check_rbac(mutate(lambda o: o.append(copy.deepcopy(url_reader))), merged, sa),
            "auth-delegator ClusterRole gone": lambda: check_rbac(mutate(lambda o: o.remove(named(o, "ClusterRole", "-auth-delegator"))), merged, sa),
            "auth-delegator ClusterRole gone (auth)": lambda: check_web_auth(mutate(lambda o: o.remove(named(o, "ClusterRole", "-auth-delegator"))), merged),
            "exporter bound to pages-reader": lambda: check_rbac(mutate(lambda o: named(o, "RoleBinding", "-pages-reader")["subjects"].append(
                {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE})), merged, sa),
        }
        failed = [n for n, fn in cases.items() if not must_fail(fn)]
        expect(not failed, f"checks accepted broken input: {failed}")
        return f"{len(cases)} broken inputs rejected"
    r.run("self-test: the web.auth.service checks reject broken input", run)
