#!/usr/bin/env bash
# Checks the shipped Prometheus alerting rules of captf-lock-exporter:
#   1. promtool check rules (with linting) on every alerts/*.rules.yaml;
#   2. promtool test rules on every alerts/tests/*.yaml;
#   3. yamllint --strict with alerts/.yamllint on everything under alerts/;
#   4. consistency: exactly the docs/contract.md section 9 alerts, each with its
#      severities (CAPTFStateLockForeignOverdue has a warning and a critical
#      rule), summary, description and a runbook_url (that it is the alert's
#      page: tests/docs_links.rs); every lock alert with the dashboard_url of the object
#      dashboard, and (but CAPTFForceUnlocks) with the Lease-watch gate and
#      keep_firing_for; the exporter's own alerts with the job selector the
#      chart substitutes; each alert covered by promtool tests that expect it
#      to fire and expect it to be silent.
# Exits non-zero when any step fails. Needs promtool, yamllint and python3
# with PyYAML (Debian: prometheus, yamllint; yamllint pulls python3-yaml):
#   apt-get update && apt-get install -y --no-install-recommends prometheus yamllint
# PROMTOOL=<path> runs another promtool (scripts/test.sh e2e3: Prometheus 3's).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
install_hint='apt-get update && apt-get install -y --no-install-recommends prometheus yamllint'
promtool="${PROMTOOL:-promtool}"

for tool in "$promtool" yamllint python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "alerts/check.sh: $tool not found; install with: $install_hint" >&2
    exit 2
  fi
done

shopt -s nullglob
rule_files=("$here"/*.rules.yaml)
test_files=("$here"/tests/*.yaml)
if [ "${#rule_files[@]}" -eq 0 ] || [ "${#test_files[@]}" -eq 0 ]; then
  echo "alerts/check.sh: no rule files (alerts/*.rules.yaml) or no tests (alerts/tests/*.yaml)" >&2
  exit 1
fi

passed=0
failed=0
step() {
  local name="$1"
  shift
  echo "==> $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    echo "FAILED: $name" >&2
    failed=$((failed + 1))
  fi
}

cd "$here" || exit 1
echo "promtool: $("$promtool" --version 2>&1 | head -1)"
step "promtool check rules" "$promtool" check rules --lint=all --lint-fatal "${rule_files[@]}"
for t in "${test_files[@]}"; do
  step "promtool test rules ${t#"$repo"/}" "$promtool" test rules "$t"
done
step "yamllint" yamllint --strict -c "$here/.yamllint" "$here"
step "rules and tests agree" python3 - "$repo" "${rule_files[@]}" -- "${test_files[@]}" <<'PY'
import sys

import yaml

repo = sys.argv[1]
args = sys.argv[2:]
sep = args.index("--")
rule_files, test_files = args[:sep], args[sep + 1:]

# Alert name -> its rules' severities (one rule per severity).
EXPECTED = {
    "CAPTFStateLockForeignOverdue": {"warning", "critical"},
    "CAPTFForceUnlocks": {"warning"},
    "CAPTFStateLockStale": {"warning"},
    "CAPTFStateLockHeldTooLong": {"warning"},
    "CAPTFStateLockHolderNodeLost": {"warning"},
    "CAPTFStateLockVerdictMismatch": {"warning"},
    "CAPTFStateLockUnverified": {"warning"},
    "CAPTFLockExporterDown": {"warning"},
    "CAPTFLockExporterWatchDown": {"warning"},
}
LOCK_ALERTS = {n for n in EXPECTED if n.startswith(("CAPTFStateLock", "CAPTFForceUnlocks"))}
# Lock alerts whose expression reads lock series at evaluation time: they
# trust only replicas whose Lease watch is up, and bridge short gaps.
GATED = LOCK_ALERTS - {"CAPTFForceUnlocks"}
GATE = 'and on (cluster, job, instance) (captf_lock_exporter_watch_up{resource="leases"} == 1)'
# The chart substitutes these texts (docs/decisions/alerts.md): the Grafana
# prefix of dashboard_url and the exporter job selector.
DASHBOARD_URL = (
    "https://grafana.example/d/captf-state-lock-object/captf-state-lock-object"
    '?var-cluster={{ or $labels.cluster "$__all" }}&var-namespace={{ $labels.namespace }}'
    "&var-kind={{ $labels.kind }}&var-name={{ $labels.name }}"
)
JOB_SELECTOR = 'job=~".*captf-lock-exporter.*"'
# Each alert's runbook_url is its own page, docs/runbooks/<alert>.md: that, the
# page's existence and the links inside the pages are checked in one place,
# tests/docs_links.rs (the rules, the chart and these unit tests alike).
errors = []

alerts = {}  # name -> its rules
for path in rule_files:
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            alerts.setdefault(rule["alert"], []).append(rule)

if set(alerts) != set(EXPECTED):
    errors.append(f"alerts {sorted(alerts)} differ from docs/contract.md section 9 {sorted(EXPECTED)}")
for name, rules in alerts.items():
    severities = [r.get("labels", {}).get("severity") for r in rules]
    if len(set(severities)) != len(severities):
        errors.append(f"{name}: defined twice with severity {severities}")
    if name in EXPECTED and set(severities) != EXPECTED[name]:
        errors.append(f"{name}: severities {sorted(map(str, severities))}, want {sorted(EXPECTED[name])}")
    for rule in rules:
        ann = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                errors.append(f"{name}: no {key} annotation")
        if name in LOCK_ALERTS and ann.get("dashboard_url") != DASHBOARD_URL:
            errors.append(f"{name}: dashboard_url {ann.get('dashboard_url')!r}, want {DASHBOARD_URL!r}")
        if name not in LOCK_ALERTS and "dashboard_url" in ann:
            errors.append(f"{name}: a dashboard_url, but it is no lock alert")
        if name in GATED:
            if GATE not in rule["expr"]:
                errors.append(f"{name}: expr lacks the Lease-watch gate {GATE!r}")
            if not rule.get("keep_firing_for"):
                errors.append(f"{name}: no keep_firing_for")
        if name == "CAPTFLockExporterDown" and JOB_SELECTOR not in rule["expr"]:
            errors.append(f"{name}: expr lacks the job selector {JOB_SELECTOR!r} the chart substitutes")

fires, silent = set(), set()
cases = groups = 0
for path in test_files:
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for test in doc.get("tests", []):
        groups += 1
        for case in test.get("alert_rule_test", []):
            cases += 1
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
for name in alerts:
    if name not in fires:
        errors.append(f"{name}: no promtool test expects it to fire")
    if name not in silent:
        errors.append(f"{name}: no promtool test expects it to be silent")

# Lock-info labels (whoever writes a Lease chooses them) reach chat only through the
# neutralising filter (mixin/lib/text.libsonnet, issue 33 defect 4; tests/hostile-labels).
import re  # noqa: E402 (here, beside its one use)

SAFE = ' | reReplaceAll "[^A-Za-z0-9@._-]" "_" | reReplaceAll "(?i)@(all|channel|everyone|group|here)" "_$1" }}'
for name, rules in alerts.items():
    for rule in rules:
        for key, text in rule.get("annotations", {}).items():
            for label in ("holder", "operation", "lock_id"):
                shown = len(re.findall(r"\{\{-?\s*\$labels\.%s\b" % label, text))
                if shown != text.count("{{ $labels.%s%s" % (label, SAFE)):
                    errors.append(f"{name}: annotation {key} shows $labels.{label} without the filter")

for e in errors:
    print(f"  {e}", file=sys.stderr)
rules = sum(len(r) for r in alerts.values())
print(f"  {len(alerts)} alerts ({rules} rules), {groups} promtool test groups, {cases} alert_rule_test cases")
sys.exit(1 if errors else 0)
PY

echo "alerts: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
