// The alerts of docs/contract.md section 9, one group. Each file holds one alert (or the
// exporter's two); this one adds what they share: every alert's runbook_url, the lock alerts'
// dashboard_url (the object dashboard) and, on the lock alerts that read lock series at
// evaluation time, keep_firing_for: a failed scrape writes staleness markers and a rollout starts
// the replicas' observed ages again, and neither must resolve an alert and page again.
//
// Scrape assumptions: the exporter is scraped with honor_labels (ServiceMonitor `honorLabels:
// true`), so its own `namespace` label, the locked object's namespace, wins over the target's;
// any number of replicas may be scraped at once (lib/promql.libsonnet: one alert, never two).
// Only PromQL and template functions common to Prometheus 2.x and 3.x are used, and no result
// depends on a sample sitting exactly on a range edge (Prometheus 3 made range selectors
// left-open). An `observed` age is a lower bound: the descriptions then say "at least".
{
  prometheusAlerts+:: {
    local c = $._config,
    local q = (import '../lib/promql.libsonnet')(c),
    local files = [
      import 'foreign-overdue.libsonnet',
      import 'force-unlocks.libsonnet',
      import 'stale.libsonnet',
      import 'held-too-long.libsonnet',
      import 'holder-node-lost.libsonnet',
      import 'verdict-mismatch.libsonnet',
      import 'unverified.libsonnet',
      import 'exporter.libsonnet',
    ],
    local isLock(name) = std.startsWith(name, 'CAPTFStateLock') || name == 'CAPTFForceUnlocks',
    local shared(rule) = rule {
      [if isLock(rule.alert) && rule.alert != 'CAPTFForceUnlocks' then 'keep_firing_for']: c.keepFiringFor,
      annotations+: {
        runbook_url: c.runbookURLPattern % rule.alert,
        [if isLock(rule.alert) then 'dashboard_url']: q.dashboardUrl,
      },
    },

    groups+: [{
      name: 'captf-lock-exporter',
      rules: [shared(r) for f in files for r in f(c).rules],
    }],
  },
}
