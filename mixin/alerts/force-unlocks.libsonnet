// CAPTFForceUnlocks: CAPTF force-unlocked an object's state lock in the last hour. The
// per-object counter counts ForceUnlocked events; increase() treats a drop (exporter restart) as
// a counter reset, and the series exists at 0 before the first increment, so an object's first
// force-unlock is visible. Every replica counts the same events: `max`, not `sum`. No `for` (the
// event is a fact; the alert resolves an hour after the last one), no Lease-watch gate and no
// keep_firing_for: the counter comes from the Event watch, a replica whose watch broke can only
// miss force-unlocks, never invent one, and the 1h range already spans a missed scrape.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  rules: [{
    alert: 'CAPTFForceUnlocks',
    expr: |||
      max by (%s) (
        increase(captf_state_lock_force_unlocks_total[1h])
      ) > 0
    ||| % q.object,
    labels: { severity: 'warning' },
    annotations: {
      summary: 'CAPTF force-unlocked the state lock of %s%s' % [q.objectText, q.inCluster],
      description: text.fold(|||
        CAPTF force-unlocked the Terraform state lock of %s at least once in the last hour (the
        exact count is in captf_state_lock_force_unlocks_total): a runner Job's pod died while it
        held the lock (killed, OOM, node lost), and the object's next Job cleared the stale lock and
        carried on. Find out why the previous Job died.
      ||| % q.objectText),
    },
  }],
}
