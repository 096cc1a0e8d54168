// CAPTFForceUnlocks: CAPTF force-unlocked an object's state lock in the last hour. An object's
// force-unlock series exist only once a force-unlock of it was seen (no series at 0 before it:
// docs/decisions/series-that-say-something.md), so increase() alone would miss the first one,
// whose counter appears at 1. The last force-unlock's time says it without a baseline: the Event
// happened within the hour. It also survives a restart (the relisted Event sets the time but is
// not counted again). increase() stays for an Event whose time lay too far ahead of the exporter's
// clock to be kept (it counts, without a time). Every replica sees the same events: `max`, not
// `sum`. No `for` (the
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
        time() - captf_state_lock_last_force_unlock_timestamp_seconds < 3600
      )
      or
      max by (%s) (
        increase(captf_state_lock_force_unlocks_total[1h])
      ) > 0
    ||| % [q.object, q.object],
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
