#!/usr/bin/env bash
# Build Prometheus 3 (prometheus, promtool) and Alertmanager (alertmanager,
# amtool) from the Go modules pinned in this directory's wrapper modules
# (go.mod + go.sum here and in alertmanager/), into a cache keyed by version:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin/prometheus-3.16.0
#   .../promtool-3.16.0  .../alertmanager-0.35.0  .../amtool-0.35.0
#
# A binary that is already there is not rebuilt (a warm machine pays a stat).
# Each binary is written to a temporary name and renamed, so a killed build
# never leaves a half-written binary under the final name.
#
#   tools/prometheus3/build.sh              build what is missing, print the paths
#   tools/prometheus3/build.sh --env        the same, printed as PROM3_* assignments
#   tools/prometheus3/build.sh --print-env  build nothing: print the PROM3_* assignments,
#                                           exit 3 when a binary is not in the cache
#
# Build tags: netgo (as upstream's .promu.yml), and for Prometheus
# remove_all_sd + enable_kubernetes_sd: only the file/http/kubernetes service
# discoveries are compiled in (the test uses static_configs; the cloud SDKs
# are most of the cold build). No builtinassets: the web UI is absent, the
# HTTP API is complete.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/bin"
mkdir -p "$cache"

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}"
# Resolve only what go.sum pins; never rewrite go.mod from a test run.
export GOFLAGS="$GOFLAGS -mod=readonly"

mod_version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build <module dir> <package> <cache name> <version string> <tags>
build() {
  local dir="$1" pkg="$2" out="$cache/$3" ver="$4" tags="$5"
  if [[ -x "$out" ]]; then
    echo "build.sh: $out present, not rebuilt" >&2
    return 0
  fi
  local tmp="$out.tmp.$$"
  local t0=$SECONDS
  echo "build.sh: building $pkg -> $out" >&2
  (cd "$dir" && go build -trimpath -tags "$tags" -o "$tmp" -ldflags "-s -w \
      -X github.com/prometheus/common/version.Version=$ver \
      -X github.com/prometheus/common/version.Revision=module-v${ver} \
      -X github.com/prometheus/common/version.Branch=go-module \
      -X github.com/prometheus/common/version.BuildUser=captf-lock-exporter \
      -X github.com/prometheus/common/version.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)" \
      "$pkg")
  mv -f "$tmp" "$out"
  echo "build.sh: built $out in $((SECONDS - t0)) s" >&2
}

# Prometheus: module v0.3xx.y is release 3.xx.y.
pmod="$(mod_version "$here" github.com/prometheus/prometheus)"    # v0.316.0
if [[ ! "$pmod" =~ ^v0\.3([0-9]{2})\.([0-9]+)$ ]]; then
  echo "build.sh: unexpected Prometheus module version $pmod" >&2; exit 1
fi
pver="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
amod="$(mod_version "$here/alertmanager" github.com/prometheus/alertmanager)"  # v0.35.0
aver="${amod#v}"

ptags="netgo,remove_all_sd,enable_kubernetes_sd"
print_env() {
  echo "PROM3_PROMETHEUS=$cache/prometheus-$pver"
  echo "PROM3_PROMTOOL=$cache/promtool-$pver"
  echo "PROM3_ALERTMANAGER=$cache/alertmanager-$aver"
  echo "PROM3_AMTOOL=$cache/amtool-$aver"
}
if [[ "${1:-}" == "--print-env" ]]; then
  print_env
  for b in "prometheus-$pver" "promtool-$pver" "alertmanager-$aver" "amtool-$aver"; do
    [[ -x "$cache/$b" ]] || { echo "build.sh: $cache/$b not built (run $0)" >&2; exit 3; }
  done
  exit 0
fi

build "$here" github.com/prometheus/prometheus/cmd/prometheus "prometheus-$pver" "$pver" "$ptags"
build "$here" github.com/prometheus/prometheus/cmd/promtool "promtool-$pver" "$pver" "$ptags"
# Alertmanager's ui package embeds ui/app/dist (//go:embed app/dist), the output of its npm UI
# build, which the module zip does not contain: built from the module as it is, go build fails
#   .../alertmanager@v0.35.0/ui/web.go:31:12: pattern app/dist: no matching files found
# and -overlay may not replace files under GOMODCACHE. So the module source that go.sum here
# verifies is copied to the cache, a one-line placeholder page is put at app/dist/{elm,mantine},
# and the commands are built from that copy with upstream's own go.mod/go.sum (-mod=readonly).
# The web UI answers with the placeholder; the API (what Prometheus and the test use) is complete.
am_source() {
  local src="$cache/../src/alertmanager-$aver"
  if [[ ! -f "$src/.prepared" ]]; then
    local dir
    dir="$(cd "$here/alertmanager" && go mod download github.com/prometheus/alertmanager &&
           go list -m -f '{{.Dir}}' github.com/prometheus/alertmanager)"
    rm -rf "$src" "$src.tmp.$$"
    mkdir -p "$(dirname "$src")"
    cp -r "$dir" "$src.tmp.$$"
    chmod -R u+w "$src.tmp.$$"
    for ui in elm mantine; do
      mkdir -p "$src.tmp.$$/ui/app/dist/$ui"
      echo "Alertmanager $aver built by captf-lock-exporter tools/prometheus3/build.sh without its web UI; the API is complete." \
        >"$src.tmp.$$/ui/app/dist/$ui/index.html"
    done
    touch "$src.tmp.$$/.prepared"
    mv "$src.tmp.$$" "$src"
  fi
  echo "$src"
}
if [[ ! -x "$cache/alertmanager-$aver" || ! -x "$cache/amtool-$aver" ]]; then
  amsrc="$(am_source)"
  build "$amsrc" ./cmd/alertmanager "alertmanager-$aver" "$aver" netgo
  build "$amsrc" ./cmd/amtool "amtool-$aver" "$aver" netgo
fi

if [[ "${1:-}" == "--env" ]]; then
  print_env
else
  echo "$cache/prometheus-$pver"
  echo "$cache/promtool-$pver"
  echo "$cache/alertmanager-$aver"
  echo "$cache/amtool-$aver"
fi
