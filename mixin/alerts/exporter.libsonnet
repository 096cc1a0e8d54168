// The exporter's own health: its scrape and its watches.
local text = import '../lib/text.libsonnet';

function(c) {
  local by = '%s, namespace, job' % c.clusterLabel,
  local up = 'up{%s}' % c.captfLockExporterSelector,
  local inCluster = '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % c.clusterLabel,
  rules: [
    // Every target of an exporter job failing its scrape, or (second branch) a job scraped within
    // the last day that has no target any more: one alert per cluster, namespace and job, the same
    // labels in both branches, so the last failing target disappearing does not resolve the alert
    // and restart its `for`. A Prometheus that loads the rules but never scraped the exporter has
    // no such `up` series, so nothing fires there (a bare absent() fired forever). One replica of
    // several being down is not an outage: the others still report every lock.
    {
      alert: 'CAPTFLockExporterDown',
      expr: |||
        max by (%(by)s) (%(up)s) == 0
        or
        (
          max by (%(by)s) (max_over_time(%(up)s[1d])) * 0
          unless on (%(by)s)
          max by (%(by)s) (%(up)s)
        )
      ||| % { by: by, up: up },
      'for': '5m',
      labels: { severity: 'warning' },
      annotations: {
        summary: 'captf-lock-exporter is down or no longer scraped%s' % inCluster,
        description: text.fold(|||
          No target of job {{ $labels.job }}{{ if $labels.namespace }} in namespace
          {{ $labels.namespace }}{{ end }} has been scraped successfully for 5 minutes: its targets
          fail, or the job has none left although Prometheus scraped it within the last day.
          State-lock metrics are missing, so the other CAPTFStateLock alerts cannot fire.
        |||),
      },
    },
    // A watch is down when it was up for less than half of the last 10 minutes on every replica
    // (`max` across replicas: one replica with a healthy watch still reports every lock), for 5
    // minutes. A watch that goes down and stays down fires after 10 minutes; one that flaps, down
    // most of the time with short recoveries, fires too. A resource the cluster does not serve is
    // left out with --skip-resources: then it has no series. When the exporter is not scraped at
    // all the series are gone and CAPTFLockExporterDown fires instead.
    {
      alert: 'CAPTFLockExporterWatchDown',
      expr: |||
        max by (%s, resource) (
          avg_over_time(captf_lock_exporter_watch_up[10m])
        ) < 0.5
      ||| % by,
      'for': '5m',
      labels: { severity: 'warning' },
      annotations: {
        summary: "captf-lock-exporter's {{ $labels.resource }} watch is mostly down%s" % inCluster,
        description: text.fold(|||
          No replica of captf-lock-exporter{{ if $labels.job }} (job {{ $labels.job }}{{ if
          $labels.namespace }}, namespace {{ $labels.namespace }}{{ end }}){{ end }} has had its
          {{ $labels.resource }} watch up for even half of the last 10 minutes, and that has lasted
          5 minutes. Lock metrics that depend on {{ $labels.resource }} are stale or missing, and
          the state-lock alerts may be wrong or silent. If the cluster does not serve
          {{ $labels.resource }} at all, leave it out with --skip-resources.
        |||),
      },
    },
  ],
}
