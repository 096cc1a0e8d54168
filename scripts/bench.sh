#!/usr/bin/env bash
# Issue-9 benchmark: the real exporter binary against a fast fake API server, per fleet size.
#
#   scripts/bench.sh [sizes...]     default: 1000 10000 100000 (Prometheus 2.42 fed at the largest)
#   scripts/bench.sh --smoke        1000 objects only, short idle window, no Prometheus: it must
#                                   complete and print the table; nothing about times is asserted.
#   scripts/bench.sh --ksm [...]    the exporter beside kube-state-metrics on a real kube-apiserver
#                                   (runs scripts/bench-ksm.sh with the rest of the arguments).
#
# Extra flags for tools/bench/bench.py go after `--`, e.g. `scripts/bench.sh 10000 -- --idle-seconds 60`.
# Logs and kubeconfigs go to $BENCH_WORKDIR (default: a fresh temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == --ksm ]]; then
  shift
  exec scripts/bench-ksm.sh "$@"
fi

smoke=0
sizes=()
extra=()
while (($#)); do
  case "$1" in
    --smoke) smoke=1 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) sizes+=("$1") ;;
  esac
  shift
done
if ((smoke)); then
  sizes=(1000)
  extra=(--idle-seconds 5 --scrapes 20 --prometheus no "${extra[@]}")
elif ((${#sizes[@]} == 0)); then
  sizes=(1000 10000 100000)
fi

cargo build --release --locked --examples --bins

if ((!smoke)) && ! command -v prometheus >/dev/null; then
  echo "installing Prometheus (Debian prometheus 2.42) for the largest size" >&2
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } >&2; then
    echo "could not install prometheus; that part of the run will say so" >&2
  fi
fi

# bench.py starts the fake API, the exporter and Prometheus and stops them by PID, on failure and
# on SIGINT/SIGTERM too; this trap forwards an interrupt of the script to it.
py_pid=""
trap '[[ -n "$py_pid" ]] && kill -TERM "$py_pid" 2>/dev/null; wait "$py_pid" 2>/dev/null' INT TERM
python3 tools/bench/bench.py \
  --exporter target/release/captf-lock-exporter \
  --fake-api target/release/examples/fake_api \
  ${BENCH_WORKDIR:+--workdir "$BENCH_WORKDIR"} \
  "${extra[@]}" "${sizes[@]}" &
py_pid=$!
wait "$py_pid"
