#!/usr/bin/env bash
# Validates dashboards/*.json: Grafana schema, lint, PromQL parse (lezer-promql
# and promtool), metric/label allow-list. Exit status non-zero on any failure.
#
# Needs: node >= 18 + npm (dependencies come from the npm registry through
# `npm ci` and the committed package-lock.json), python3 (queries.py), and
# promtool (Debian: apt-get install --no-install-recommends prometheus).
# DASHBOARDS_SKIP_PROMTOOL=1 skips the promtool pass where it is not installed.
set -euo pipefail
cd "$(dirname "$0")"

start=$(date +%s%N)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  cat "$log" >&2
  echo "check.sh: npm ci failed" >&2
  exit 1
fi
echo "check.sh: npm ci in $(( ($(date +%s%N) - start) / 1000000 )) ms"
status=0
node check.js || status=$?
echo "check.sh: total $(( ($(date +%s%N) - start) / 1000000 )) ms"
exit "$status"
