#!/usr/bin/env bash
# Runs every test of captf-lock-exporter on a fresh Debian bookworm machine:
# installs what the tests need (apt, pip, npm; cargo fetches crates), starts
# every service the tests use (on 127.0.0.1, stopped by PID), and prints a
# closing "N passed, N failed" line. Usage: scripts/test.sh [stage ...]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=never

log() { printf '\n=== %s ===\n' "$*"; }

install_deps() {
  log "install dependencies"
  local apt_pkgs=(prometheus prometheus-alertmanager yamllint chromium)
  local missing=()
  for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
  fi
  python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt || return 1
}

stage_rust() {
  log "cargo fmt, clippy, test"
  cargo fmt --all -- --check || return 1
  cargo clippy --all-targets --locked -- -D warnings || return 1
  cargo test --locked || return 1
}

stage_alerts() {
  log "alert rules: promtool check + unit tests"
  bash alerts/check.sh || return 1
}

stage_dashboards() {
  log "dashboards: schema, PromQL, metric names"
  bash tools/dashboards/check.sh || return 1
}

stage_chart() {
  log "chart: helm render/lint, schemas, RBAC, kustomize"
  bash tools/chart/check.sh || return 1
}

stage_integration() {
  log "integration: the binary against kmock's emulator"
  cargo build --locked || return 1
  EXPORTER_BIN="$ROOT/target/debug/captf-lock-exporter" python3 -m pytest -q tests/integration || return 1
}

stage_e2e() {
  log "end to end: emulator + exporter + Prometheus + Alertmanager"
  cargo build --locked || return 1
  EXPORTER_BIN="$ROOT/target/debug/captf-lock-exporter" python3 -m pytest -q -s tests/e2e || return 1
}

stage_bench() {
  log "benchmark smoke run: 1k objects, real binary, fake API (no times asserted)"
  ./scripts/bench.sh --smoke || return 1
}

stage_soak() {
  log "soak smoke run: 2 minutes of churn at 10k objects, real binary, fake API (targets asserted)"
  ./scripts/soak.sh --smoke || return 1
}

ALL=(rust alerts dashboards chart integration e2e bench soak)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${ALL[@]}")

passed=0; failed=0; failed_names=()
install_deps || { echo "dependency installation failed"; echo "0 passed, 1 failed"; exit 1; }
for s in "${stages[@]}"; do
  start=$(date +%s)
  if "stage_$s"; then
    passed=$((passed + 1)); echo "stage $s: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1)); failed_names+=("$s"); echo "stage $s: FAILED ($(( $(date +%s) - start )) s)"
  fi
done
echo
[ $failed -gt 0 ] && echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
