"""Constants, values variants, the check runner and the Helm engine wrappers of check_chart.py."""
from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
import tempfile
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
    ("infrastructure.cluster.x-k8s.io", "terraformplans"),
    ("cluster.x-k8s.io", "clusters"),
    ("", "nodes"),
}
# Cluster-scoped reads: only a ClusterRole grants them, so a namespaced
# install (a Role per namespace) goes without (issue 49: the lost-node
# evidence then rests on the runner pod alone, --skip-resources=nodes).
CLUSTER_READS = {("", "nodes")}
# Issue 23: with --auth=kubernetes the exporter also creates these two
# reviews (cluster-scoped), its only rights that are not get/list/watch.
AUTH_RULES = {
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
# Which non-resource URL each protected path needs (chart/README.md).
METRICS_URLS = ["/metrics"]
PAGES_URLS = ["/", "/locks/*"]
SA_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
TLS_DIR = "/etc/captf-lock-exporter/tls"
CR_KINDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}
# cert-manager.io/v1 (web.tls.type=certManager): checked field by field here, against cert-manager's
# own CRDs by the node stage (tests/node).
CERT_MANAGER_KINDS = {"Issuer", "ClusterIssuer", "Certificate"}
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
        "sampleLimit": 1000000,
        "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "management"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "captfRules": {"inhibit": True, "labels": {"alertmanagerConfig": "captf"}},
    "metricsReader": {"serviceAccounts": [{"name": "prometheus-k8s", "namespace": "monitoring"},
                                          {"name": "kube-prometheus-stack-prometheus", "namespace": "monitoring"}]},
    "pagesReader": {"users": ["alice@example.com"], "groups": ["platform-oncall"],
                    "serviceAccounts": [{"name": "lock-pages-proxy", "namespace": "captf-system"}]},
    "skipResources": ["terraformmachinepools", "clusters"],
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
# Issue 18: the PrometheusRule rendered from values, and availability knobs turned.
RULES = {
    "replicaCount": 3,
    "podDisruptionBudget": {"maxUnavailable": "", "minAvailable": "50%"},
    "topologySpread": {"whenUnsatisfiable": "DoNotSchedule", "topologyKey": "topology.kubernetes.io/zone"},
    "prometheusRule": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "additionalRuleLabels": {"team": "platform", "severity": "not-this"},
        "disabledRules": ["CAPTFForceUnlocks"],
        "runbookBaseUrl": "https://wiki.example.org/runbooks/captf/",
        "grafanaUrl": "https://grafana.example.org/",
        "jobSelector": 'job="lock-exporter"',
    },
}
PROMETHEUS_SA = {"name": "prometheus-k8s", "namespace": "monitoring"}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    # Issue 23: the defaults with a ServiceMonitor and Prometheus' account.
    "monitored": {"serviceMonitor": {"enabled": True}, "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]}},
    # A cert-manager Secret, the CA from a Secret, the token from a Secret.
    "tls-secret": {
        "web": {"tls": {"type": "existingSecret", "existingSecret": {"name": "captf-lock-exporter-tls"}},
                "auth": {"audiences": ["captf-lock-exporter"]}},
        "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]},
        "pagesReader": {"groups": ["platform-oncall"]},
        "serviceMonitor": {
            "enabled": True,
            "authorization": {"credentials": {"name": "prometheus-scrape-token", "key": "token"}},
            "tlsConfig": {"ca": {"secret": {"name": "captf-lock-exporter-tls", "key": "ca.crt"}}},
        },
    },
    # The CA from a ConfigMap (trust-manager's bundle) and an explicit name.
    "ca-configmap": {
        "web": {"tls": {"type": "existingSecret", "existingSecret": {"name": "lock-exporter-cert", "caKey": ""}}},
        "serviceMonitor": {
            "enabled": True,
            "tlsConfig": {"ca": {"configMap": {"name": "cluster-ca-bundle", "key": "ca.crt"}},
                          "serverName": "lock-exporter.example.internal"},
        },
        "networkPolicy": {"ingress": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                                      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}},
    },
    # secretName is ignored without TLS (--tls-cert-file conflicts with --plain-http).
    "plain-http": {"web": {"tls": {"enabled": False, "type": "existingSecret", "existingSecret": {"name": "unused-tls"}}},
                   "serviceMonitor": {"enabled": True}},
    # Issue 50: each web.tls.type. cert-manager with the chart's self-signed CA, with a CA of yours,
    # with your ClusterIssuer; the exporter's self-signed certificate only with insecureSkipVerify by name;
    # a full tlsConfig passed through.
    "cert-manager": {"web": {"tls": {"type": "certManager", "certManager": {"duration": "720h", "renewBefore": "240h"}}},
                     "serviceMonitor": {"enabled": True}, "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]}},
    "cert-manager-ca": {"web": {"tls": {"type": "certManager", "certManager": {"issuer": "ca", "caSecretName": "corp-ca"}}},
                        "serviceMonitor": {"enabled": True}},
    "cert-manager-issuer": {"web": {"tls": {"type": "certManager", "certManager": {
        "existingIssuer": {"kind": "ClusterIssuer", "name": "corp-pki"}}}}, "serviceMonitor": {"enabled": True}},
    "self-signed-insecure": {"web": {"tls": {"type": "selfSigned"}},
                             "serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}}},
    "tls-passthrough": {"serviceMonitor": {"enabled": True, "tlsConfig": {
        "ca": {"configMap": {"name": "trust-bundle", "key": "bundle.pem"}}, "serverName": "exporter.example.internal",
        "cert": {"secret": {"name": "prom-client", "key": "tls.crt"}}, "keySecret": {"name": "prom-client", "key": "tls.key"},
        "minVersion": "TLS13"}}},
    "no-auth": {"web": {"auth": {"enabled": False}}, "serviceMonitor": {"enabled": True},
                "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]}},
    "insecure": {"web": {"tls": {"enabled": False}, "auth": {"enabled": False}}, "networkPolicy": {"enabled": False},
                 "serviceMonitor": {"enabled": True}},
    "no-rbac": {"rbac": {"create": False}, "serviceMonitor": {"enabled": True}},
    # Who may read with web.auth.service: get on services/metrics and services/pages of the chart's
    # Service (--auth-service), granted by Roles in the release namespace, bound to every kind of
    # subject; beside namespaced reads with the readers unbound; and ignored with auth off.
    "auth-service": {"web": {"auth": {"service": True}}, "serviceMonitor": {"enabled": True},
                     "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]},
                     "pagesReader": {"users": ["alice@example.com"], "groups": ["platform-oncall"],
                                     "serviceAccounts": [{"name": "lock-pages-proxy", "namespace": "captf-system"}]}},
    "auth-service-namespaced": {"web": {"auth": {"service": True}}, "watchNamespaces": ["team-a", "team-b"]},
    "no-auth-service": {"web": {"auth": {"enabled": False, "service": True}}, "serviceMonitor": {"enabled": True}},
    "all-on": ALL_ON,
    "rules": RULES,
    "single": {"replicaCount": 1, "podDisruptionBudget": {"enabled": False}, "topologySpread": {"enabled": False}},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"], "logFormat": "text", "logLevel": "debug",
                   "metricsReader": {"serviceAccounts": [PROMETHEUS_SA]}},
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
    "skipResources: [leases]": {"skipResources": ["leases"]},
    "skipResources: [machines]": {"skipResources": ["machines"]},
    "podDisruptionBudget.maxUnavailable: lots": {"podDisruptionBudget": {"maxUnavailable": "lots"}},
    "topologySpread.whenUnsatisfiable: Sometimes": {"topologySpread": {"whenUnsatisfiable": "Sometimes"}},
    "prometheusRule.jobSelector: captf (not a matcher)": {"prometheusRule": {"jobSelector": "captf"}},
    "prometheusRule.grafanaUrl: grafana.local (no scheme)": {"prometheusRule": {"grafanaUrl": "grafana.local"}},
    "prometheusRule.additionalRuleLabels: a number": {"prometheusRule": {"additionalRuleLabels": {"team": 1}}},
    "serviceMonitor.sampleLimit: -1": {"serviceMonitor": {"sampleLimit": -1}},
    # Issue 23.
    'web.tls.enabled: "yes"': {"web": {"tls": {"enabled": "yes"}}},
    "web.tls.secretName: Bad_Name": {"web": {"tls": {"secretName": "Bad_Name"}}},
    "web.tls.certFile (unknown key)": {"web": {"tls": {"certFile": "/tls.crt"}}},
    "web.auth.mode (unknown key)": {"web": {"auth": {"mode": "none"}}},
    "web.auth.audiences: a string": {"web": {"auth": {"audiences": "captf-lock-exporter"}}},
    "web.auth.audiences: a blank inside": {"web": {"auth": {"audiences": ["captf lock-exporter"]}}},
    'web.auth.service: "yes"': {"web": {"auth": {"service": "yes"}}},
    "metricsReader.serviceAccounts: no namespace": {"metricsReader": {"serviceAccounts": [{"name": "prometheus-k8s"}]}},
    "metricsReader.serviceAccounts: a string": {"metricsReader": {"serviceAccounts": ["monitoring/prometheus-k8s"]}},
    "pagesReader.users: a string": {"pagesReader": {"users": "alice"}},
    "serviceMonitor.tlsConfig.ca: secret and configMap": {"serviceMonitor": {"tlsConfig": {"ca": {
        "secret": {"name": "a", "key": "ca.crt"}, "configMap": {"name": "b", "key": "ca.crt"}}}}},
    "serviceMonitor.tlsConfig.ca.secret: no key": {"serviceMonitor": {"tlsConfig": {"ca": {"secret": {"name": "a"}}}}},
    'serviceMonitor.tlsConfig.insecureSkipVerify: "true"': {"serviceMonitor": {"tlsConfig": {"insecureSkipVerify": "true"}}},
    "serviceMonitor.tlsConfig.unknownKey": {"serviceMonitor": {"tlsConfig": {"verify": False}}},
    "serviceMonitor.tlsConfig.minVersion: TLS1.3": {"serviceMonitor": {"tlsConfig": {"minVersion": "TLS1.3"}}},
    # Issue 50.
    "web.tls.secretName (gone: type existingSecret)": {"web": {"tls": {"secretName": "x"}}},
    "web.tls.type: vault": {"web": {"tls": {"type": "vault"}}},
    "web.tls.type existingSecret without a name": {"web": {"tls": {"type": "existingSecret"}}},
    "web.tls.certManager.issuer: acme": {"web": {"tls": {"certManager": {"issuer": "acme"}}}},
    "web.tls.certManager.existingIssuer.kind: Vault": {"web": {"tls": {"certManager": {"existingIssuer": {"kind": "Vault"}}}}},
    "web.tls.certManager.duration: 90d": {"web": {"tls": {"certManager": {"duration": "90d"}}}},
    "web.tls.helm.certDurationDays: 0": {"web": {"tls": {"helm": {"certDurationDays": 0}}}},
    "serviceMonitor.authorization.credentials: no key": {"serviceMonitor": {"authorization": {"credentials": {"name": "s"}}}},
    "serviceMonitor.bearerTokenFile: relative": {"serviceMonitor": {"bearerTokenFile": "token"}},
    "networkPolicy.ingress.namespaceSelector: a string": {"networkPolicy": {"ingress": {"namespaceSelector": "monitoring"}}},
}


class Fail(Exception):
    pass


def must_fail(fn: Callable[[], Any]) -> bool:
    """Whether a check rejects its input (raises Fail): what every self-test asks of a broken render."""
    try:
        fn()
    except Fail:
        return True
    return False


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

