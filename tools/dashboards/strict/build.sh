#!/usr/bin/env bash
# Build the strict dashboard decoder (this directory: grafana-foundation-sdk's Go types, the version
# go.mod + go.sum pin) into the version-keyed cache the other Go tools use (tools/go-build-cached.sh):
#   ${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}/dashstrict-<sdk version>-<source hash>
# The key carries a hash of main.go, go.mod and go.sum, so an edit builds anew and a warm machine
# pays a stat. Prints the binary's path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$(cd "$here/../.." && pwd)"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }
# shellcheck source=../../go-build-cached.sh
. "$tools/go-build-cached.sh"
sdk=$(cd "$here" && go list -m -f '{{.Version}}' github.com/grafana/grafana-foundation-sdk/go)
hash=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
go_build_cached dashstrict "$sdk-$hash" "$here" . "-s -w"
