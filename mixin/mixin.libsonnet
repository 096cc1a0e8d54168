// captf-lock-exporter's monitoring mixin: the Prometheus alerts and Grafana dashboards, in the
// layout of kubernetes-mixin, node-mixin and kube-state-metrics' mixin. Import it and override
// _config (config.libsonnet: the exporter's job selector, the cluster label, the runbook and
// Grafana URLs):
//
//   (import 'captf-lock-exporter/mixin/mixin.libsonnet') + { _config+:: { clusterLabel: 'k8s_cluster' } }
//
// alerts/captf-lock-exporter.rules.yaml and dashboards/*.json are this mixin with the defaults,
// written by mixin/generate.sh.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
