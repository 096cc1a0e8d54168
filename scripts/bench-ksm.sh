#!/usr/bin/env bash
# Issue 17: captf-lock-exporter side by side with kube-state-metrics against one real kube-apiserver.
#
#   scripts/bench-ksm.sh                       10k lock Leases, 1k held; table on stdout
#   scripts/bench-ksm.sh --leases 2000 --held 200 --idle-seconds 20     (flags of tools/bench/ksm_compare.py)
#
# Builds what is missing: kube-state-metrics (tools/ksm/build.sh), kube-apiserver and etcd
# (tools/kube/build.sh), the release exporter (cargo build --release --locked); then runs
# tools/bench/ksm_compare.py, which starts the control plane, the exporter, KSM and a static
# server one after the other and stops each by PID (also on failure and on Ctrl-C).
# Logs go to $BENCH_WORKDIR (default: a new temporary directory, printed first); the JSON
# results to $BENCH_OUT (default: $BENCH_WORKDIR/ksm-compare.json, or target/ksm-compare.json).
# About 7 minutes on 2 cores with the binaries built (creating the 20k objects is 1-2 of them;
# each tool starts 3 times, --starts); a cold KSM build adds about 4. 100k Leases
# (--leases 100000 --held 10000): about 16 minutes, 9 of them creating the 200k objects.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,15p' "$0"; exit 0 ;; esac

ksm="$(tools/ksm/build.sh)"
tools/kube/build.sh all >/dev/null
# Always: a release binary left from an older checkout would be measured as this one.
cargo build --release --locked --bin captf-lock-exporter

out="${BENCH_OUT:-${BENCH_WORKDIR:+$BENCH_WORKDIR/ksm-compare.json}}"
out="${out:-target/ksm-compare.json}"
mkdir -p "$(dirname "$out")"

# ksm_compare.py stops what it started on SIGINT/SIGTERM; this trap forwards an interrupt to it.
py_pid=""
trap '[[ -n "$py_pid" ]] && kill -TERM "$py_pid" 2>/dev/null; wait "$py_pid" 2>/dev/null' INT TERM
python3 tools/bench/ksm_compare.py \
  --exporter target/release/captf-lock-exporter \
  --ksm "$ksm" \
  --out "$out" \
  ${BENCH_WORKDIR:+--workdir "$BENCH_WORKDIR"} \
  "$@" &
py_pid=$!
wait "$py_pid"
