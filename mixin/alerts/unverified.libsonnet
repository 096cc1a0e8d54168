// CAPTFStateLockUnverified: an own_unverified lock (the holder is one of the object's own runner
// pods, but reading the pod failed: RBAC, API errors) for 30 minutes: neither live nor stale can
// be told, so the stale and held-too-long alerts cannot speak for it. A trusted replica that did
// verify the same lock (own_live or own_stale, same lock ID) silences it: one replica's failing
// reads are not the lock's problem. The value is the lock's age.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  local verified = q.trusted('captf_state_lock_info{class=~"own_live|own_stale"}'),
  rules: [{
    alert: 'CAPTFStateLockUnverified',
    expr: '(\n%s\n  unless on (%s, lock_id)\n  (\n%s\n  )\n)\n* on (%s) group_left ()\n%s\n' % [
      text.indent(q.lockInfo('class="own_unverified"'), 2),
      q.object,
      text.indent(verified, 4),
      q.object,
      q.age,
    ],
    'for': '30m',
    labels: { severity: 'warning' },
    annotations: {
      summary: text.fold(|||
        The state lock of %s%s has been held by a runner the exporter cannot verify for 30 minutes
      ||| % [q.objectText, q.inCluster]),
      description: text.fold(|||
        Runner %s (operation %s, lock ID %s) holds the Terraform state lock of %s (%s old), and for
        30 minutes no replica of captf-lock-exporter could read its pod (the reads fail: RBAC on
        pods, or API server errors). The exporter cannot tell whether the runner is alive or its
        lock stale, so the stale and held-too-long alerts cannot fire for this lock.
      ||| % [q.holder, q.operation, q.lockId, q.objectText, q.ageText]),
    },
  }],
}
