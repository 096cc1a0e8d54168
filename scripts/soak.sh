#!/usr/bin/env bash
# Issue-15 soak: the release exporter against the fake API (10k objects) with churn: locks taken
# and released, holder pods dying, objects created and deleted, a watch restart every minute (the
# watches' timeoutSeconds), a relist (every watch ended with a 410) every 10 minutes. Prints one row
# a minute (RSS, open fds, series, transitions made / seen / missed, watch and list starts) and one
# verdict per target; exits 1 when a target fails.
#
#   scripts/soak.sh                 30 minutes of churn (about 33 minutes in all)
#   scripts/soak.sh --minutes N     N minutes
#   scripts/soak.sh --smoke         2 minutes, a relist at 0:30, in the warm-up minute (the CI version;
#                                   RSS drift printed, not judged: two minutes hold no steady state)
#
# Extra flags for tools/soak/soak.py go after `--`, e.g. `scripts/soak.sh --minutes 5 -- --rate 4`.
# Logs and the kubeconfig go to $SOAK_WORKDIR (default: a fresh temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=30
extra=()
while (($#)); do
  case "$1" in
    --smoke) minutes=2; extra+=(--relist-first 0.5 --rss-report-only) ;;
    --minutes) minutes="$2"; shift ;;
    --minutes=*) minutes="${1#*=}" ;;
    --) shift; extra+=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

cargo build --release --locked --examples --bins

# soak.py starts the fake API and the exporter and stops them by PID, on failure and on
# SIGINT/SIGTERM too; this trap forwards an interrupt of the script to it.
py_pid=""
trap '[[ -n "$py_pid" ]] && kill -TERM "$py_pid" 2>/dev/null; wait "$py_pid" 2>/dev/null' INT TERM
python3 tools/soak/soak.py \
  --exporter target/release/captf-lock-exporter \
  --fake-api target/release/examples/fake_api \
  --minutes "$minutes" \
  ${SOAK_WORKDIR:+--workdir "$SOAK_WORKDIR"} \
  "${extra[@]}" &
py_pid=$!
wait "$py_pid"
