#!/usr/bin/env bash
# Build go-jsonnet's `jsonnet` and `jsonnetfmt` (github.com/google/go-jsonnet, the version this
# directory's go.mod + go.sum pin) into the version-keyed cache the other Go tools use:
#
#   ${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}/jsonnet-v0.22.0
#   .../jsonnetfmt-v0.22.0
#
# A binary that is already there is not rebuilt (a warm machine pays a stat); a cold build is
# a few seconds. Built under a lock and renamed into place (tools/go-build-cached.sh), so two
# runs at once build once and a killed build leaves no half-written binary.
#
#   tools/jsonnet/build.sh              build what is missing, print the paths
#   tools/jsonnet/build.sh --env        the same, printed as JSONNET=... JSONNETFMT=...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }

# shellcheck source=../go-build-cached.sh
. "$here/../go-build-cached.sh"

version="$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' github.com/google/go-jsonnet)"
jsonnet="$(go_build_cached jsonnet "$version" "$here" github.com/google/go-jsonnet/cmd/jsonnet "-s -w")"
jsonnetfmt="$(go_build_cached jsonnetfmt "$version" "$here" github.com/google/go-jsonnet/cmd/jsonnetfmt "-s -w")"

if [ "${1:-}" = --env ]; then
  echo "JSONNET=$jsonnet"
  echo "JSONNETFMT=$jsonnetfmt"
else
  echo "$jsonnet"
  echo "$jsonnetfmt"
fi
