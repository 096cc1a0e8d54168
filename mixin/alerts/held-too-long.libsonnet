// CAPTFStateLockHeldTooLong: an own_live lock older than the object's effective
// activeDeadlineSeconds plus the runner pod's 600 s termination grace: Kubernetes should have
// killed that runner by now. The value is the lock's age; the deadline is per object (max over
// the trusted replicas: the later deadline, so fewer false alarms while replicas disagree).
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  rules: [{
    alert: 'CAPTFStateLockHeldTooLong',
    expr: '(\n%s\n)\n> on (%s) group_left ()\n(\n%s\n  + 600\n)\n' % [
      text.indent(q.lockAge('class="own_live"'), 2),
      q.object,
      text.indent(q.objectMax('captf_state_lock_deadline_seconds'), 2),
    ],
    'for': '1m',
    labels: { severity: 'warning' },
    annotations: {
      summary: 'A runner has held the state lock of %s%s past its deadline' % [q.objectText, q.inCluster],
      description: text.fold(|||
        Runner %s (operation %s, lock ID %s) has held the Terraform state lock of %s for %s, longer
        than the object's activeDeadlineSeconds plus the 600 s termination grace, and its pod still
        exists and has not finished: a runner that should be dead (stuck terminating, on a lost
        node, or hung).
      ||| % [q.holder, q.operation, q.lockId, q.objectText, q.ageText]),
    },
  }],
}
