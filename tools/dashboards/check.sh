#!/usr/bin/env bash
# Validates dashboards/*.json (generated from the jsonnet mixin by mixin/generate.sh; its
# --check, scripts/test.sh's mixin stage, keeps them equal). Exit status non-zero on any failure.
#
#   check.js       Grafana JSON Schema (generated from @grafana/schema now),
#                  lint, PromQL parse (lezer-promql and promtool), metric and
#                  label allow-list (metrics.txt), filters, $__rate_interval
#   selftest.js    breaks the dashboards on purpose, one way at a time, and
#                  requires check.js to fail with the expected message
#   live_check.py  runs every query against a real Prometheus scraping two
#                  fixture exporter replicas; each must return the right data
#   strict/        grafana-foundation-sdk's Go types (Grafana's own schemas, generated)
#                  decode every dashboard strictly: the dashboard, each panel's options and
#                  fieldConfig (custom included) and targets; an unknown or mistyped key fails
#   strict_selftest.py  renames keys as a typo would, one at a time, and requires the strict
#                  decoder to fail naming the key
#
# Needs: node >= 18 + npm (dependencies from the npm registry via `npm ci`
# and the committed package-lock.json), Go 1.26 (the strict decoder, from the
# Go module proxy through strict/go.sum, built once into the version-keyed cache), python3,
# and Debian's `prometheus` package (promtool and prometheus):
#   apt-get install -y --no-install-recommends prometheus
# On a workstation without it: DASHBOARDS_SKIP_PROMTOOL=1 DASHBOARDS_SKIP_LIVE=1.
set -uo pipefail
cd "$(dirname "$0")"

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
start=$(date +%s%N)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  cat "$log" >&2
  echo "check.sh: npm ci failed" >&2
  exit 1
fi
echo "check.sh: npm ci in $(ms "$start") ms"

passed=0
failed=0
step() {
  local name=$1
  shift
  local t
  t=$(date +%s%N)
  echo "== $name"
  if "$@"; then
    passed=$((passed + 1))
    echo "== $name: ok in $(ms "$t") ms"
  else
    failed=$((failed + 1))
    echo "== $name: FAILED in $(ms "$t") ms"
  fi
}
step check.js node check.js
step selftest.js node selftest.js
step live_check.py python3 live_check.py
strict_decoder() {
  local bin
  bin=$(bash strict/build.sh) || return 1
  "$bin" ../../dashboards/*.json || return 1
  python3 strict_selftest.py "$bin" ../../dashboards/*.json
}
step "strict decode (grafana-foundation-sdk Go types) + typo self-test" strict_decoder

echo "check.sh: total $(ms "$start") ms"
echo "dashboards: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
