#!/usr/bin/env bash
# Build the real control plane for the `realkube` test stage from Go modules:
#   kube-apiserver  from tools/kube (k8s.io/kubernetes, version in tools/kube/VERSION)
#   kube-apiserver  from tools/kube-old too with `old` (the oldest minor the newest Cluster API
#                   release supports for a management cluster; docs/decisions/kube-versions.md)
#   kubectl         from tools/kube too (same module and version; only when asked for:
#                   the realtools stage needs it, realkube does not)
#   etcd            from tools/etcd (go.etcd.io/etcd/server/v3, version in tools/etcd/VERSION)
# into ${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}/<name>-<version>.
# Does nothing for a binary that already exists. Safe to run twice at once:
# a second run waits on the first's lock and then finds the binary, which is
# how scripts/test.sh starts the build early in the background and the stage
# waits for it. Each build's `/usr/bin/time -v` report is kept next to the
# binary as <name>-<version>.build.txt.
#
# Binaries are keyed by version (kube-apiserver-v1.36.3, kube-apiserver-v1.33.13), so both
# servers live side by side in the cache.
#
# usage: tools/kube/build.sh [all|etcd|kube-apiserver|old|both|kubectl] ; prints the paths built.
#   all: etcd + the newest kube-apiserver; old: the older kube-apiserver only; both: all three;
#   kubectl: kubectl at the newest kube-apiserver's version.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$(dirname "$here")"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }

# shellcheck source=../go-build-cached.sh
. "$tools/go-build-cached.sh"

build_one() { # build_one NAME MODULE_DIR PACKAGE LDFLAGS (the version from MODULE_DIR/VERSION)
  go_build_cached "$1" "$(cat "$2/VERSION")" "$2" "$3" "$4"
}

build_kas() { # build_kas MODULE_DIR
  local kv
  kv=$(cat "$1/VERSION")
  build_one kube-apiserver "$1" k8s.io/kubernetes/cmd/kube-apiserver \
    "-s -w -X k8s.io/component-base/version.gitVersion=$kv -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kv" | cut -d. -f2)"
}

what="${1:-all}"
case "$what" in all|etcd|kube-apiserver|old|both|kubectl) ;; *) echo "usage: $0 [all|etcd|kube-apiserver|old|both|kubectl]" >&2; exit 2 ;; esac
if [ "$what" = kubectl ]; then
  kv=$(cat "$tools/kube/VERSION")
  kldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kldflags="$kldflags -X $p.gitVersion=$kv -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$kv" | cut -d. -f2)"
  done
  build_one kubectl "$tools/kube" k8s.io/kubernetes/cmd/kubectl "$kldflags"
  exit 0
fi
case "$what" in all|etcd|both) build_one etcd "$tools/etcd" go.etcd.io/etcd/server/v3 "-s -w" ;; esac
case "$what" in all|kube-apiserver|both) build_kas "$tools/kube" ;; esac
case "$what" in old|both) build_kas "$tools/kube-old" ;; esac
