#!/usr/bin/env bash
# Issue-9 benchmark: the real exporter binary against a fast fake API server, per fleet size.
#
#   scripts/bench.sh [sizes...]     default: 1000 10000 100000 (Prometheus 2.42 fed at the largest)
#   scripts/bench.sh --smoke        1000 objects only, short idle window, no Prometheus, the churn
#                                   phases of issue 48 a few seconds each: it must complete and
#                                   print the tables; nothing about times is asserted.
#   scripts/bench.sh 10000 100000 -- --churn-phases all --churn-only
#                                   issue 48's churn phases alone (tools/bench/churn_phases.py).
#   scripts/bench.sh --ksm [...]    the exporter beside kube-state-metrics on a real kube-apiserver
#                                   (runs scripts/bench-ksm.sh with the rest of the arguments).
#
#   scripts/bench.sh --exporter old=PATH --exporter new=PATH [sizes...]
#                                   each binary in turn per size (issue 35's before/after from one
#                                   run, side by side); BENCH_OLD=PATH does the same with
#                                   old=PATH and new=the binary built here.
#
# Extra flags for tools/bench/bench.py go after `--`, e.g. `scripts/bench.sh 10000 -- --idle-seconds 60`
# or `-- --rounds 2`. Logs and kubeconfigs go to $BENCH_WORKDIR (default: a fresh temporary directory).
# BENCH_BIN_DIR=DIR takes captf-lock-exporter and examples/fake_api from DIR (a release target
# directory built elsewhere) and skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == --ksm ]]; then
  shift
  exec scripts/bench-ksm.sh "$@"
fi

smoke=0
sizes=()
extra=()
exporters=()
while (($#)); do
  case "$1" in
    --smoke) smoke=1 ;;
    --) shift; extra=("$@"); break ;;
    --exporter) exporters+=(--exporter "$2"); shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) sizes+=("$1") ;;
  esac
  shift
done
if ((smoke)); then
  sizes=(1000)
  # The churn phases too (tools/bench/churn_phases.py), in a few seconds each: this checks that
  # the fake API's churn endpoints and the copied old bucket hash work, not what they cost.
  extra=(--idle-seconds 5 --scrapes 20 --prometheus no
         --churn-phases all --phase-seconds 2 --probes 3 --crowd 50 --burst-rounds 1 "${extra[@]}")
elif ((${#sizes[@]} == 0)); then
  sizes=(1000 10000 100000)
fi

bin_dir="${BENCH_BIN_DIR:-target/release}"
if [[ -z "${BENCH_BIN_DIR:-}" ]]; then
  cargo build --release --locked --examples --bins
fi
if ((${#exporters[@]} == 0)); then
  if [[ -n "${BENCH_OLD:-}" ]]; then
    exporters=(--exporter "old=$BENCH_OLD" --exporter "new=$bin_dir/captf-lock-exporter")
  else
    exporters=(--exporter "$bin_dir/captf-lock-exporter")
  fi
fi

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
  "${exporters[@]}" \
  --fake-api "$bin_dir/examples/fake_api" \
  ${BENCH_WORKDIR:+--workdir "$BENCH_WORKDIR"} \
  "${extra[@]}" "${sizes[@]}" &
py_pid=$!
wait "$py_pid"
