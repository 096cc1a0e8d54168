#!/usr/bin/env bash
# Build the real control plane for the `realkube` test stage from Go modules:
#   kube-apiserver  from tools/kube (k8s.io/kubernetes, version in tools/kube/VERSION)
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
# usage: tools/kube/build.sh [all|etcd|kube-apiserver|kubectl] ; prints the paths built.
# `all` is etcd and kube-apiserver.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$(dirname "$here")"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }

timed() { # timed REPORT cmd... : run cmd under /usr/bin/time -v when there is one
  if [ -x /usr/bin/time ]; then /usr/bin/time -v -o "$1" "${@:2}"; else "${@:2}"; fi
}

build_one() { # build_one NAME MODULE_DIR PACKAGE LDFLAGS
  local name=$1 dir=$2 pkg=$3 ldflags=$4 version out
  version=$(cat "$dir/VERSION")
  out="$cache/$name-$version"
  exec 9>"$out.lock"
  flock 9
  if [ ! -x "$out" ]; then
    echo "build.sh: building $name $version into $out" >&2
    local start=$SECONDS
    (cd "$dir" && timed "$out.build.txt.tmp" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
    [ -f "$out.build.txt.tmp" ] && mv "$out.build.txt.tmp" "$out.build.txt"
    echo "build.sh: built $name $version in $((SECONDS - start)) s" >&2
  fi
  flock -u 9
  exec 9>&-
  echo "$out"
}

what="${1:-all}"
kv=$(cat "$tools/kube/VERSION")
case "$what" in all|etcd|kube-apiserver|kubectl) ;; *) echo "usage: $0 [all|etcd|kube-apiserver|kubectl]" >&2; exit 2 ;; esac
kldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kldflags="$kldflags -X $p.gitVersion=$kv -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$kv" | cut -d. -f2)"
done
if [ "$what" = kubectl ]; then
  build_one kubectl "$tools/kube" k8s.io/kubernetes/cmd/kubectl "$kldflags"
  exit 0
fi
if [ "$what" != kube-apiserver ]; then
  build_one etcd "$tools/etcd" go.etcd.io/etcd/server/v3 "-s -w"
fi
if [ "$what" != etcd ]; then
  build_one kube-apiserver "$tools/kube" k8s.io/kubernetes/cmd/kube-apiserver \
    "-s -w -X k8s.io/component-base/version.gitVersion=$kv -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kv" | cut -d. -f2)"
fi
