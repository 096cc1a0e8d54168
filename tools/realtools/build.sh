#!/usr/bin/env bash
# Build the real tools of the `realtools` test stage from Go modules:
#   tofu       from tools/opentofu  (github.com/opentofu/opentofu/cmd/tofu, version in its VERSION)
#   terraform  from tools/terraform (github.com/hashicorp/terraform, version in its VERSION)
#   kubectl    from tools/kube      (k8s.io/kubernetes/cmd/kubectl, the kube-apiserver version)
# into ${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}/<name>-<version>,
# the same cache and the same rules as tools/kube/build.sh: a binary already there is not
# rebuilt; a build holds <name>-<version>.lock, so a second run waits and then finds the
# binary (scripts/test.sh starts this early in the background and the stage waits on it);
# the binary is written under a temporary name and renamed; each build's
# `/usr/bin/time -v` report is kept as <name>-<version>.build.txt.
# Every module is resolved from the committed go.mod + go.sum only (-mod=readonly).
#
# usage: tools/realtools/build.sh [all|tofu|terraform|kubectl]...   build, print the paths
#        tools/realtools/build.sh --print-env   build nothing; print REALTOOLS_* assignments,
#                                               exit 3 when a binary is missing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$(dirname "$here")"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }

tofu_v=$(cat "$tools/opentofu/VERSION")
tf_v=$(cat "$tools/terraform/VERSION")
kube_v=$(cat "$tools/kube/VERSION")

# shellcheck source=../go-build-cached.sh
. "$tools/go-build-cached.sh"

build_one() { # build_one NAME VERSION MODULE_DIR PACKAGE LDFLAGS
  go_build_cached "$@"
}

if [ "${1:-}" = --print-env ]; then
  echo "REALTOOLS_TOFU=$cache/tofu-$tofu_v"
  echo "REALTOOLS_TERRAFORM=$cache/terraform-$tf_v"
  echo "REALTOOLS_KUBECTL=$cache/kubectl-$kube_v"
  missing=0
  for b in "tofu-$tofu_v" "terraform-$tf_v" "kubectl-$kube_v"; do
    [ -x "$cache/$b" ] || { echo "build.sh: $cache/$b not built (run $0)" >&2; missing=1; }
  done
  [ $missing = 0 ] || exit 3
  exit 0
fi

[ $# -gt 0 ] || set -- all
for what in "$@"; do
  case "$what" in
    tofu|all)
      # dev=no: the version is the release's own (1.12.6), not 1.12.6-dev; it is what the
      # lock-info's Version field carries.
      build_one tofu "$tofu_v" "$tools/opentofu" github.com/opentofu/opentofu/cmd/tofu \
        "-s -w -X github.com/opentofu/opentofu/version.dev=no" ;;&
    terraform|all)
      build_one terraform "$tf_v" "$tools/terraform" github.com/hashicorp/terraform \
        "-s -w -X github.com/hashicorp/terraform/version.dev=no" ;;&
    kubectl|all)
      "$tools/kube/build.sh" kubectl ;;
    tofu|terraform) ;;
    *) echo "usage: $0 [all|tofu|terraform|kubectl]... | --print-env" >&2; exit 2 ;;
  esac
done
