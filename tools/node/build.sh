#!/usr/bin/env bash
# Build everything the opt-in `node` stage runs (tests/node/) from Go modules into the same
# version-keyed cache as tools/kube/build.sh:
#   kubelet, kube-controller-manager, kube-scheduler, kube-proxy  tools/kube (k8s.io/kubernetes)
#   containerd, containerd-shim-runc-v2, ctr                      tools/node/containerd
#   CNI plugins bridge, host-local, loopback, portmap             tools/node/cni
#   prometheus-operator, prometheus-config-reloader               tools/node/operator
#   helm                                                          tools/node/helm
#   pause (the pod sandbox's process)                             tools/node/pause
#   kube-router (its network policy controller enforces the chart's NetworkPolicy)
#                                                                 tools/node/kube-router
#   cert-manager's controller (cert-manager mode of the chart)    tools/node/cert-manager
#   impostor (a TLS server with a certificate nobody trusts)      tools/node/impostor
# kube-apiserver, etcd and kubectl come from tools/kube/build.sh, Prometheus 3 and Alertmanager from
# tools/prometheus3/build.sh; runc is Debian's. A binary already in the cache is not rebuilt.
#
# usage: tools/node/build.sh [--env]   (--env: print NODE_<NAME>=path lines for the test)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$(dirname "$here")"
cache="${CAPTF_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }
# shellcheck source=../go-build-cached.sh
. "$tools/go-build-cached.sh"

env_lines=()
record() { env_lines+=("NODE_$1=$2"); }   # record NAME PATH

modver() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

kv=$(cat "$tools/kube/VERSION")
kube_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags="$kube_ldflags -X $p.gitVersion=$kv -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$kv" | cut -d. -f2)"
done
for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
  record "$(echo "$c" | tr 'a-z-' 'A-Z_')" "$(go_build_cached "$c" "$kv" "$tools/kube" "k8s.io/kubernetes/cmd/$c" "$kube_ldflags")"
done

# containerd without the cgo-only snapshotters (btrfs, zfs, devmapper): overlayfs is the one used.
cv=$(modver "$here/containerd" github.com/containerd/containerd/v2)
c_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$cv -X github.com/containerd/containerd/v2/version.Revision=module"
for c in containerd containerd-shim-runc-v2 ctr; do
  p=$(GOFLAGS="$GOFLAGS -tags=no_btrfs,no_zfs,no_devmapper,no_cri_dockerd" \
    go_build_cached "$c" "$cv" "$here/containerd" "github.com/containerd/containerd/v2/cmd/$c" "$c_ldflags")
  record "$(echo "$c" | tr 'a-z-' 'A-Z_')" "$p"
done

# CNI plugins: kept as cni-<plugin>-<version>; the test links them under their plain names.
nv=$(modver "$here/cni" github.com/containernetworking/plugins)
for c in main/bridge ipam/host-local main/loopback meta/portmap; do
  n=$(basename "$c")
  p=$(go_build_cached "cni-$n" "$nv" "$here/cni" "github.com/containernetworking/plugins/plugins/$c" \
    "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$nv")
  record "CNI_$(echo "$n" | tr 'a-z-' 'A-Z_')" "$p"
done

ov=$(modver "$here/operator" github.com/prometheus-operator/prometheus-operator)
o_ldflags="-s -w -X github.com/prometheus/common/version.Version=${ov#v} -X github.com/prometheus/common/version.Revision=module -X github.com/prometheus/common/version.Branch=go-module"
record OPERATOR "$(go_build_cached prometheus-operator "$ov" "$here/operator" \
  github.com/prometheus-operator/prometheus-operator/cmd/operator "$o_ldflags")"
record CONFIG_RELOADER "$(go_build_cached prometheus-config-reloader "$ov" "$here/operator" \
  github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader "$o_ldflags")"

hv=$(modver "$here/helm" helm.sh/helm/v4)
record HELM "$(go_build_cached helm "$hv" "$here/helm" helm.sh/helm/v4/cmd/helm \
  "-s -w -X helm.sh/helm/v4/internal/version.version=$hv")"

record PAUSE "$(go_build_cached pause v1 "$here/pause" . "-s -w")"
record IMPOSTOR "$(go_build_cached impostor "v1-$(sha256sum "$here/impostor/main.go" | cut -c1-12)" "$here/impostor" . "-s -w")"

kr=$(modver "$here/kube-router" github.com/cloudnativelabs/kube-router/v2)
record KUBE_ROUTER "$(go_build_cached kube-router "$kr" "$here/kube-router" \
  github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
  "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$kr -X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=module")"

# cert-manager's controller is the one piece the stage can do without: when it does not build, the
# stage installs cert-manager's CRDs only and writes the Secret as the controller would (say so).
cm=$(modver "$here/cert-manager" github.com/cert-manager/cert-manager)
if p=$(go_build_cached cert-manager-controller "$cm" "$here/cert-manager" \
  github.com/cert-manager/cert-manager/cmd/controller \
  "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$cm -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=module"); then
  record CERT_MANAGER "$p"
else
  echo "build.sh: cert-manager $cm's controller did not build (above); the node stage runs without it" >&2
fi

if [ "${1:-}" = --env ]; then printf '%s\n' "${env_lines[@]}"; else printf '%s\n' "${env_lines[@]#*=}"; fi
