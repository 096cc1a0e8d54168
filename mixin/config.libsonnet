{
  _config+:: {
    // Selects the exporter's own scrape targets in `up` (CAPTFLockExporterDown). A ServiceMonitor's
    // job is the Service's name, and the chart's contains `captf-lock-exporter`. The chart
    // substitutes this text with its value prometheusRule.jobSelector.
    captfLockExporterSelector: 'job=~".*captf-lock-exporter.*"',

    // The label that tells clusters apart when one Prometheus (or Thanos, Mimir) sees several.
    // Every aggregation keeps it, so two clusters' locks never merge; one cluster without the
    // label works as it is.
    clusterLabel: 'cluster',

    // One page per alert (docs/runbooks/); %s is the alert's name.
    runbookURLPattern: 'https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks/%s.md',

    // The Grafana the lock alerts' dashboard_url points at. The chart substitutes the placeholder
    // with its value prometheusRule.grafanaUrl (or drops dashboard_url without one).
    grafanaUrl: 'https://grafana.example',

    // How long a lock alert keeps firing after its expression last held: a failed scrape or an
    // exporter rollout must not resolve it and page again (Prometheus >= 2.42).
    keepFiringFor: '10m',

    // Grafana: the dashboards' uids (dashboard_url links to the object dashboard's) and tags.
    dashboardUids: {
      locks: 'captf-state-locks',
      object: 'captf-state-lock-object',
    },
    dashboardTags: ['captf', 'captf-lock-exporter'],
  },
}
