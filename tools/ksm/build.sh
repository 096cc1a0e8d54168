#!/usr/bin/env bash
# Build kube-state-metrics from its Go module k8s.io/kube-state-metrics/v2, at the version in
# tools/ksm/VERSION, as pinned by this directory's wrapper module (go.mod + go.sum), into
#
#   ${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}/kube-state-metrics-<version>
#
# the same cache as tools/kube/build.sh and tools/prometheus3/build.sh. Does nothing when the
# binary is there. Safe to run twice at once: the build holds <binary>.lock (flock), so a second run
# waits for the first and then finds the binary. The binary is written to a temporary name and
# renamed, so a killed build never leaves a half-written binary under the final name. The
# `/usr/bin/time -v` report of a build is kept next to it as <binary>.build.txt.
#
#   tools/ksm/build.sh            build when missing; prints the path
#   tools/ksm/build.sh --path     build nothing: print the path, exit 3 when it is not built
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
version="$(cat "$here/VERSION")"
out="$cache/kube-state-metrics-$version"

if [[ "${1:-}" == "--path" ]]; then
  echo "$out"
  [[ -x "$out" ]] || { echo "build.sh: $out not built (run $0)" >&2; exit 3; }
  exit 0
fi

PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
# Resolve only what go.sum pins; never rewrite go.mod from a build.
export GOFLAGS="$GOFLAGS -mod=readonly"

mkdir -p "$cache"
exec 9>"$out.lock"
flock 9
if [[ ! -x "$out" ]]; then
  pinned="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kube-state-metrics/v2)"
  if [[ "$pinned" != "$version" ]]; then
    echo "build.sh: go.mod pins k8s.io/kube-state-metrics/v2 $pinned but VERSION says $version" >&2
    exit 1
  fi
  client_go="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/client-go)"
  echo "build.sh: building kube-state-metrics $version (client-go $client_go) into $out" >&2
  start=$SECONDS
  # The ldflags of upstream's Makefile (`make build`), with the values it would take from git.
  ldflags="-s -w \
    -X github.com/prometheus/common/version.Version=$version \
    -X github.com/prometheus/common/version.Revision=module-$version \
    -X github.com/prometheus/common/version.Branch=go-module \
    -X github.com/prometheus/common/version.BuildUser=captf-lock-exporter \
    -X github.com/prometheus/common/version.BuildDate=$(date -u +%Y%m%d-%H:%M:%S) \
    -X k8s.io/kube-state-metrics/v2/pkg/app.ClientGoVersion=$client_go"
  tmp="$out.tmp.$$"
  trap 'rm -f "$tmp" "$out.build.txt.tmp"' EXIT
  build=(go build -trimpath -ldflags "$ldflags" -o "$tmp" k8s.io/kube-state-metrics/v2)
  if [[ -x /usr/bin/time ]]; then
    (cd "$here" && /usr/bin/time -v -o "$out.build.txt.tmp" "${build[@]}")
    mv -f "$out.build.txt.tmp" "$out.build.txt"
  else
    (cd "$here" && "${build[@]}")
  fi
  mv -f "$tmp" "$out"
  trap - EXIT
  echo "build.sh: built kube-state-metrics $version in $((SECONDS - start)) s" >&2
fi
flock -u 9
exec 9>&-
echo "$out"
