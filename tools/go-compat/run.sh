#!/usr/bin/env bash
# Compares the Rust lock-info decoder with real Go encoding/json on generated
# documents. Opt-in: not part of scripts/test.sh.
# Usage: tools/go-compat/run.sh [documents (default 100000)] [seed (default 1)]
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
ROOT=$(cd ../.. && pwd)
DOCS=${1:-100000}
SEED=${2:-1}

if ! command -v go >/dev/null 2>&1; then
  echo "go not found: installing Debian's golang-go"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go >/dev/null
fi
go version

# The program has no dependencies: never fetch a module or a toolchain.
OUT=${CARGO_TARGET_DIR:-$ROOT/target}/go-compat
mkdir -p "$OUT"
GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod go build -o "$OUT/oracle" "$HERE"

cd "$ROOT"
GO_COMPAT_ORACLE="$OUT/oracle" GO_COMPAT_DOCS="$DOCS" GO_COMPAT_SEED="$SEED" \
  cargo test --locked --test lockinfo_robustness -- --ignored --exact go_compat_matches_real_go --nocapture
