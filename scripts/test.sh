#!/usr/bin/env bash
# Runs every test of captf-lock-exporter on a fresh Debian bookworm machine:
# installs what the tests need (apt, pip, npm; cargo fetches crates), starts
# every service the tests use (on 127.0.0.1, stopped by PID), and prints a
# closing "N passed, N failed" line. Usage: scripts/test.sh [stage ...]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=never

log() { printf '\n=== %s ===\n' "$*"; }

# A fresh clone on a machine that ran the tests before (CI's case) reuses the crates compiled then:
# target/ becomes a link to a cache outside the clone, and cargo's own fingerprints decide what is
# built again (the dependencies, most of the compile time, are not). A checkout with a target/ of
# its own keeps it; CAPTF_CARGO_CACHE=0 turns this off. The cache is emptied once it passes 20 GiB:
# a clone at another path compiles this crate beside the last one's (docs/decisions/ci-time.md).
shared_target() {
  [ -e "$ROOT/target" ] || [ -L "$ROOT/target" ] && return 0
  [ "${CAPTF_CARGO_CACHE:-1}" = 0 ] && return 0
  local dir="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/captf-lock-exporter/cargo-target"
  if [ -d "$dir" ] && [ "$(du -s --block-size=1G "$dir" | cut -f1)" -gt 20 ]; then
    echo "cargo cache $dir over 20 GiB: emptied"; rm -rf "$dir"
  fi
  mkdir -p "$dir" && ln -s "$dir" "$ROOT/target" && echo "target/ -> $dir (compiled crates kept between runs)"
}
shared_target

# A full disk fails whichever stage meets it first ("No space left on device"), far from the cause:
# say it once, up front. A full run writes about 15 GiB (target/, the control plane's tools).
free_gib=$(df -P --block-size=1G "$ROOT/" 2>/dev/null | awk 'NR==2 {print $4}')
if [ -n "$free_gib" ] && [ "$free_gib" -lt 15 ]; then
  echo "WARNING: ${free_gib} GiB free on the disk of $ROOT; a full run needs about 15 GiB"
fi

install_deps() {
  log "install dependencies"
  local apt_pkgs=(prometheus prometheus-alertmanager yamllint chromium jq
    umoci skopeo runc ca-certificates binutils golang-github-containers-common iptables ipset conntrack)
  local missing=()
  for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
  fi
  python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt || return 1
}

stage_rust() {
  log "cargo fmt, clippy, test"
  cargo fmt --all -- --check || return 1
  cargo clippy --workspace --all-targets --locked -- -D warnings || return 1
  cargo test --workspace --locked || return 1
}

# The rule file and the dashboards are generated from the jsonnet mixin (mixin/); go-jsonnet is
# built once into the version-keyed cache by tools/jsonnet/build.sh (seconds; needs Go).
stage_mixin() {
  log "mixin: alerts/ and dashboards/ are the jsonnet mixin's output (mixin/generate.sh --check)"
  bash mixin/generate.sh --check || return 1
}

stage_alerts() {
  log "alert rules: promtool check + unit tests"
  bash alerts/check.sh || return 1
}

stage_dashboards() {
  log "dashboards: schema, PromQL, metric names"
  bash tools/dashboards/check.sh || return 1
}

stage_chart() {
  log "chart: helm render/lint, schemas, RBAC, kustomize"
  bash tools/chart/check.sh || return 1
}

stage_integration() {
  log "integration: the binary against kmock's emulator"
  cargo build --locked || return 1
  EXPORTER_BIN="$ROOT/target/debug/captf-lock-exporter" python3 -m pytest -q tests/integration || return 1
}

stage_e2e() {
  log "end to end: emulator + exporter + Prometheus 2.42 + Alertmanager 0.25 (Debian)"
  cargo build --locked || return 1
  EXPORTER_BIN="$ROOT/target/debug/captf-lock-exporter" python3 -m pytest -q -s tests/e2e -k prom2 || return 1
}

# Prometheus 3 + Alertmanager from Go modules (tools/prometheus3/build.sh, cached by version):
# started in the background before the first stage, waited for by stage_e2e3.
PROM3_LOG="$ROOT/target/prom3-build.log"
prom3_build_start() {
  [ -n "${PROM3_BUILD_PID:-}" ] && return 0
  mkdir -p "$ROOT/target"
  nice -n 10 bash tools/prometheus3/build.sh --env >"$PROM3_LOG" 2>&1 &
  PROM3_BUILD_PID=$!
}

stage_e2e3() {
  log "end to end: Prometheus 3 + Alertmanager 0.35 (Go modules), two exporter replicas; v3 promtool on alerts/"
  if [ -n "${PROM3_BUILD_PID:-}" ]; then
    wait "$PROM3_BUILD_PID" || { cat "$PROM3_LOG"; return 1; }
  else
    bash tools/prometheus3/build.sh --env >"$PROM3_LOG" 2>&1 || { cat "$PROM3_LOG"; return 1; }
  fi
  grep '^build.sh:' "$PROM3_LOG"
  set -a; eval "$(grep '^PROM3_' "$PROM3_LOG")"; set +a
  PROMTOOL="$PROM3_PROMTOOL" bash alerts/check.sh || return 1
  cargo build --locked || return 1
  EXPORTER_BIN="$ROOT/target/debug/captf-lock-exporter" python3 -m pytest -q -s tests/e2e -k prom3 || return 1
}

# The real control plane (kube-apiserver, etcd) is built from Go modules by tools/kube/build.sh into
# a cache keyed by version. A cold build takes minutes, so it starts in the background right after
# the dependencies are installed, overlapping the Rust stage; stage_realkube waits for it (the build
# script's lock makes a second run wait for the first and then find the binaries).
GO_BUILD_PID=""
GO_BUILD_LOG="$ROOT/target/realkube-build.log"
start_go_builds() {
  [ -n "$GO_BUILD_PID" ] && return 0   # realkube and realtools share the control plane
  command -v go >/dev/null 2>&1 || { echo "go not found: the realkube stage will fail (Go 1.26 is needed)"; return 0; }
  mkdir -p "$ROOT/target"
  log "kube-apiserver (newest and oldest supported minor) and etcd: building in the background (log: $GO_BUILD_LOG)"
  # both: etcd, kube-apiserver of tools/kube and of tools/kube-old, one after the other (two
  # cold Go builds at once would only share the cores).
  nice -n 10 bash tools/kube/build.sh both >"$GO_BUILD_LOG" 2>&1 &
  GO_BUILD_PID=$!
}

stage_realkube() {
  log "realkube: the release binary against a real kube-apiserver + etcd (RBAC, TLS, audit log)"
  local start=$SECONDS
  if [ -n "$GO_BUILD_PID" ]; then
    wait "$GO_BUILD_PID" || { echo "background Go build failed:"; tail -40 "$GO_BUILD_LOG"; return 1; }
  fi
  bash tools/kube/build.sh both || return 1
  echo "control plane binaries ready after $((SECONDS - start)) s of waiting in this stage"
  cargo build --release --locked || return 1
  # The oldest minor Cluster API supports for a management cluster (docs/decisions/kube-versions.md):
  # the classes, RBAC (the --auth-service reader Roles too), paging / watch-list and restart tests again on it, beside the newest's whole
  # suite. Each run has its own control plane on free ports and its own pytest directory; both
  # spend most of their time waiting (hangs, quiet windows, restarts), so on two cores the two
  # together take about as long as the newest's alone (CI time: docs/decisions/ci-time.md).
  local old_log="$ROOT/target/realkube-old.log"
  CAPTF_KUBE=old EXPORTER_BIN="$ROOT/target/release/captf-lock-exporter" \
    REALKUBE_REPORT="$ROOT/target/realkube-report-old.json" \
    python3 -m pytest -q --basetemp "$ROOT/target/pytest-realkube-old" \
    tests/realkube/test_classes.py tests/realkube/test_rbac.py tests/realkube/test_auth_service.py tests/realkube/test_watch.py \
    >"$old_log" 2>&1 &
  local old_pid=$! new_rc=0 old_rc=0
  if [ "$NODE_REQUESTED" = 1 ]; then node_beside_start; fi
  EXPORTER_BIN="$ROOT/target/release/captf-lock-exporter" \
    python3 -m pytest -q --basetemp "$ROOT/target/pytest-realkube" tests/realkube || new_rc=$?
  wait "$old_pid" || old_rc=$?
  log "realkube on kube-apiserver $(cat tools/kube-old/VERSION): classes, RBAC, watch-list / paging, restarts (run beside the above)"
  cat "$old_log"
  [ "$new_rc" -eq 0 ] && [ "$old_rc" -eq 0 ]
}

# cargo-auditable, auditable2cdx and cargo-deny (pinned), for the image stage: `cargo install
# --locked` into ~/.cargo/bin, in the background from the start (cold, on this 2-core machine:
# several minutes; warm: a version check, nothing built). stage_image waits for it.
# auditable2cdx, not cargo-cyclonedx: the same CycloneDX SBOM, read from the binary, for a
# 3-min install instead of 28 min (cargo-cyclonedx builds cargo itself).
CARGO_TOOLS=(cargo-auditable@0.7.7 auditable2cdx@0.1.0 cargo-deny@0.20.2)
CARGO_TOOLS_PID=""
CARGO_TOOLS_LOG="$ROOT/target/cargo-tools.log"
cargo_tools_start() {
  [ -n "$CARGO_TOOLS_PID" ] && return 0
  mkdir -p "$ROOT/target"
  (
    for t in "${CARGO_TOOLS[@]}"; do
      name=${t%@*} want=${t#*@}
      have=$(cargo install --list | sed -n "s/^$name v\(.*\):\$/\1/p")
      if [ "$have" = "$want" ]; then echo "cargo-tools: $name $want already installed"; continue; fi
      s=$SECONDS
      # one build directory for the three (they share many crates), kept for the next version bump
      CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/captf-lock-exporter/cargo-tools-target" \
        nice -n 10 cargo install --locked --quiet "$name@$want" || { echo "cargo-tools: $name@$want FAILED"; exit 1; }
      echo "cargo-tools: $name $want installed in $((SECONDS - s)) s"
    done
  ) >"$CARGO_TOOLS_LOG" 2>&1 &
  CARGO_TOOLS_PID=$!
}

stage_image() {
  log "image: scripts/image.sh (umoci, no engine), its checks, cargo deny, then runc runs it as the chart does"
  local start=$SECONDS
  if [ -n "$CARGO_TOOLS_PID" ]; then
    wait "$CARGO_TOOLS_PID" || { cat "$CARGO_TOOLS_LOG"; return 1; }
  else
    cargo_tools_start; wait "$CARGO_TOOLS_PID" || { cat "$CARGO_TOOLS_LOG"; return 1; }
  fi
  grep '^cargo-tools:' "$CARGO_TOOLS_LOG"
  echo "cargo tools ready after $((SECONDS - start)) s of waiting in this stage"
  cargo deny --locked check --hide-inclusion-graph licenses bans sources || return 1
  bash scripts/image.sh || return 1
  git rev-parse HEAD >"$ROOT/target/image/.built-from"
  if [ -n "$GO_BUILD_PID" ]; then
    wait "$GO_BUILD_PID" || { echo "background Go build failed:"; tail -40 "$GO_BUILD_LOG"; return 1; }
  fi
  bash tools/kube/build.sh all || return 1
  python3 -m pytest -q tests/image || return 1
}

# The real tools (OpenTofu, kubectl, and Terraform for realtools-terraform) are built from Go modules by
# tools/realtools/build.sh into the same cache; a cold OpenTofu build is minutes, so it starts in the
# background at the beginning too (nice: the control plane's build comes first) and the stage waits.
REALTOOLS_BUILD_PID=""
REALTOOLS_BUILD_LOG="$ROOT/target/realtools-build.log"
realtools_build_start() { # realtools_build_start TOOL...
  [ -n "$REALTOOLS_BUILD_PID" ] && return 0
  command -v go >/dev/null 2>&1 || return 0
  mkdir -p "$ROOT/target"
  log "kubectl and $*: building in the background (log: $REALTOOLS_BUILD_LOG)"
  nice -n 10 bash tools/realtools/build.sh kubectl "$@" >"$REALTOOLS_BUILD_LOG" 2>&1 &
  REALTOOLS_BUILD_PID=$!
}

run_realtools() { # run_realtools TOOL...
  local start=$SECONDS
  if [ -n "$GO_BUILD_PID" ]; then
    wait "$GO_BUILD_PID" || { echo "background Go build failed:"; tail -40 "$GO_BUILD_LOG"; return 1; }
  fi
  bash tools/kube/build.sh all || return 1
  if [ -n "$REALTOOLS_BUILD_PID" ]; then
    wait "$REALTOOLS_BUILD_PID" || { echo "background tools build failed:"; tail -40 "$REALTOOLS_BUILD_LOG"; return 1; }
    grep '^build.sh:' "$REALTOOLS_BUILD_LOG"
  fi
  bash tools/realtools/build.sh kubectl "$@" || return 1
  echo "control plane and tools ready after $((SECONDS - start)) s of waiting in this stage"
  cargo build --release --locked || return 1
  EXPORTER_BIN="$ROOT/target/release/captf-lock-exporter" REALTOOLS_TOOLS="$*" \
    python3 -m pytest -q tests/realtools || return 1
}

stage_realtools() {
  log "realtools: locks by OpenTofu's kubernetes backend, the runbook's commands run with kubectl and tofu"
  run_realtools tofu
}

# Opt-in (not in ALL): Terraform as well, and each tool's locks released by the other. A cold
# Terraform build adds about as much as OpenTofu's to a cold run.
stage_realtools-terraform() {
  log "realtools with Terraform too: locks by both backends, each released by the other tool"
  run_realtools tofu terraform
}

stage_bench() {
  log "benchmark smoke run: 1k objects, real binary, fake API (no times asserted)"
  ./scripts/bench.sh --smoke || return 1
  # What Prometheus pays (issue 48), about 10 s at 1k objects, when Prometheus 3 is already in
  # the cache (tools/prometheus3/build.sh; the e2e3 stage builds it): not worth a cold build here.
  local prom3
  prom3="$(bash tools/prometheus3/build.sh --print-env 2>/dev/null | sed -n 's/^PROM3_PROMETHEUS=//p')"
  if [ -n "$prom3" ] && [ -x "$prom3" ]; then
    log "Prometheus-cost smoke run: Prometheus 3 scraping two replicas at 1k objects (no figures asserted)"
    python3 tools/bench/prom_cost.py --smoke --prometheus "$prom3" --exporter target/release/captf-lock-exporter \
      --fake-api target/release/examples/fake_api || return 1
  else
    log "Prometheus-cost smoke run skipped: Prometheus 3 not built (tools/prometheus3/build.sh)"
  fi
  log "slow clients: 300 that never read (and over TLS 300 that never finish the handshake and 128 chatty ones) vs a real scrape, 10k objects (targets asserted: scrape <= 2 s, RSS <= 1.5x idle)"
  local sc=(python3 tools/bench/slow_clients.py --exporter target/release/captf-lock-exporter
            --fake-api target/release/examples/fake_api --objects 10000)
  "${sc[@]}" || return 1
  # over TLS also 128 keep-alive clients asking /healthz every 0.8 s (issue 33, defect 2)
  "${sc[@]}" --tls --chatty 128 || return 1
}

stage_soak() {
  log "soak smoke run: 2 minutes of churn at 10k objects, real binary, fake API (targets asserted)"
  ./scripts/soak.sh --smoke || return 1
}

# The chart on a one-node cluster with a kubelet, installed by helm as a kube-prometheus-stack user
# installs it and scraped by the Prometheus Operator's Prometheus over TLS it verifies, with the
# NetworkPolicy enforced by kube-router (issues 42 and 50). It needs root. A cold run builds the
# kubelet, containerd, the operator, helm, kube-router and cert-manager from Go modules in the
# background from the first stage on (after the control plane's build, which shares most of
# k8s.io/kubernetes' packages), so the builds overlap the stages before this one
# (docs/decisions/node.md, docs/decisions/ci-time.md).
NODE_BUILD_PID=""
NODE_BUILD_LOG="$ROOT/target/node-build.log"
node_build_start() {
  [ -n "$NODE_BUILD_PID" ] && return 0
  command -v go >/dev/null 2>&1 || return 0
  mkdir -p "$ROOT/target"
  log "node components (kubelet, containerd, CNI, prometheus-operator, helm, kube-router, cert-manager): building in the background (log: $NODE_BUILD_LOG)"
  # after the control plane's build: the two share most of k8s.io/kubernetes' packages
  ( [ -n "$GO_BUILD_PID" ] && while kill -0 "$GO_BUILD_PID" 2>/dev/null; do sleep 2; done
    nice -n 10 bash tools/node/build.sh ) >"$NODE_BUILD_LOG" 2>&1 &
  NODE_BUILD_PID=$!
}

# Waits for a background build this script started, also from a subshell (where `wait` cannot
# reach it): polls it, and leaves a failed build to the build script run next, which says why.
await_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  wait "$pid" 2>/dev/null && return 0
  while kill -0 "$pid" 2>/dev/null; do sleep 2; done
  return 0
}

node_run() {
  [ "$(id -u)" = 0 ] || { echo "the node stage needs root (kubelet, containerd, iptables)"; return 1; }
  local start=$SECONDS
  await_pid "$GO_BUILD_PID"
  bash tools/kube/build.sh all >/dev/null && bash tools/kube/build.sh kubectl >/dev/null || return 1
  await_pid "$NODE_BUILD_PID"
  bash tools/node/build.sh >/dev/null || { echo "node components build failed:"; tail -40 "$NODE_BUILD_LOG"; return 1; }
  await_pid "${PROM3_BUILD_PID:-}"
  bash tools/prometheus3/build.sh >/dev/null || return 1
  # the exporter's image as the image stage builds it (no second build when that stage ran)
  if [ ! -f "$ROOT/target/image/oci/index.json" ] || [ "$(git rev-parse HEAD)" != "$(cat "$ROOT/target/image/.built-from" 2>/dev/null)" ]; then
    [ -n "$CARGO_TOOLS_PID" ] || cargo_tools_start
    await_pid "$CARGO_TOOLS_PID"
    grep -q FAILED "$CARGO_TOOLS_LOG" && { cat "$CARGO_TOOLS_LOG"; return 1; }
    bash scripts/image.sh || return 1
    git rev-parse HEAD >"$ROOT/target/image/.built-from"
  fi
  echo "node components and images ready after $((SECONDS - start)) s of waiting in this stage"
  python3 -m pytest -q -s --basetemp "$ROOT/target/pytest-node" tests/node || return 1
}

# In a whole run the node stage runs beside realkube, which spends most of its 20 minutes waiting
# on purpose (hangs, quiet windows, restarts): started there, reported here
# (docs/decisions/ci-time.md).
NODE_BESIDE_PID=""
NODE_BESIDE_LOG="$ROOT/target/node-beside.log"
node_beside_start() {
  [ -n "$NODE_BESIDE_PID" ] && return 0
  log "node: started beside realkube (log: $NODE_BESIDE_LOG; printed under the node stage)"
  node_run >"$NODE_BESIDE_LOG" 2>&1 &
  NODE_BESIDE_PID=$!
}

stage_node() {
  log "node: helm install on a kubelet, verified scrapes through the Prometheus Operator, policy enforced by kube-router (tests/node)"
  if [ -n "$NODE_BESIDE_PID" ]; then
    local rc=0
    wait "$NODE_BESIDE_PID" || rc=$?
    echo "(run beside realkube)"
    cat "$NODE_BESIDE_LOG"
    return "$rc"
  fi
  node_run
}

# node runs beside realkube (node_beside_start): its wall time hides in realkube's waits. image
# comes before both, so the node stage finds the image built.
ALL=(rust mixin alerts dashboards chart integration e2e image realkube node realtools e2e3 bench soak)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${ALL[@]}")

passed=0; failed=0; failed_names=()
install_deps || { echo "dependency installation failed"; echo "0 passed, 1 failed"; exit 1; }
NODE_REQUESTED=0
for s in "${stages[@]}"; do [ "$s" = node ] && NODE_REQUESTED=1; done
for s in "${stages[@]}"; do
  [ "$s" = realkube ] && start_go_builds
  [ "$s" = image ] && { cargo_tools_start; start_go_builds; }
  [ "$s" = realtools ] && { start_go_builds; realtools_build_start tofu; }
  [ "$s" = realtools-terraform ] && { start_go_builds; realtools_build_start tofu terraform; }
  [ "$s" = e2e3 ] && prom3_build_start
  [ "$s" = node ] && { start_go_builds; node_build_start; cargo_tools_start; prom3_build_start; }
done
for s in "${stages[@]}"; do
  start=$(date +%s)
  if "stage_$s"; then
    passed=$((passed + 1)); echo "stage $s: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1)); failed_names+=("$s"); echo "stage $s: FAILED ($(( $(date +%s) - start )) s)"
  fi
done
echo
[ $failed -gt 0 ] && echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
