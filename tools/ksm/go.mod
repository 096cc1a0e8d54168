// Wrapper module that pins kube-state-metrics for tools/bench/ksm_compare.py (issue 17).
// Regenerate with the commands in README.md; commit go.mod and go.sum together.
module captf-lock-exporter/tools/ksm

go 1.26.0

require k8s.io/kube-state-metrics/v2 v2.20.0

tool k8s.io/kube-state-metrics/v2
