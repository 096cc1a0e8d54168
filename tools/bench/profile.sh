#!/usr/bin/env bash
# Issue 44: where the exporter's time goes at one fleet size (tools/bench/profile.py).
#
#   tools/bench/profile.sh 100000 [flags of profile.py]
#
# Builds the release binary with frame pointers and symbols into target/profile (the shipped
# build strips them), installs perf (Debian linux-perf) when missing, and prints per phase the
# functions with the most samples. perf.data and the logs stay in $PROFILE_WORKDIR (default: a
# new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends linux-perf; }
CARGO_TARGET_DIR=target/profile CARGO_PROFILE_RELEASE_STRIP=none \
  RUSTFLAGS="-C force-frame-pointers=yes" \
  cargo build --release --locked --bin captf-lock-exporter --example fake_api
wd="${PROFILE_WORKDIR:-$(mktemp -d -t captf-profile-XXXX)}"
echo "workdir: $wd" >&2
exec python3 tools/bench/profile.py --exporter target/profile/release/captf-lock-exporter \
  --fake-api target/profile/release/examples/fake_api --workdir "$wd" "$@"
