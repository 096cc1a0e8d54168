// CAPTFStateLockStale: an own_stale lock (holder pod gone, Succeeded or Failed) that no Job has
// cleared for 15 minutes; CAPTF force-unlocks it only when it starts the object's next Job. The
// value is the lock's age.
//
// While a TerraformPlan of the object is Pending, its apply waits for approval and no Job starts:
// the alert then names the plan in the optional label `plan`. The right side of the plan join is
// one series per held lock: a pending plan (topk: one when several are pending, so the join stays
// many-to-one) or else `group` of the lock itself (value 1, no `plan`), so a lock without a
// pending plan keeps firing, without the label.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  local pendingPlan = |||
    topk by (%(o)s) (
      1,
      group by (%(o)s, plan) (
    %(pending)s
      )
    )
    or on (%(o)s)
    group by (%(o)s) (
    %(info)s
    )
  ||| % {
    o: q.object,
    pending: text.indent(q.trusted('captf_state_lock_plan_pending'), 4),
    info: text.indent(q.trusted('captf_state_lock_info'), 2),
  },
  rules: [{
    alert: 'CAPTFStateLockStale',
    expr: '(\n%s\n)\n* on (%s) group_left (plan)\n(\n%s)\n' % [
      text.indent(q.lockAge('class="own_stale"'), 2),
      q.object,
      text.indent(pendingPlan, 2),
    ],
    'for': '15m',
    labels: { severity: 'warning' },
    annotations: {
      summary: text.fold(|||
        %s%s has had a stale state lock for 15 minutes{{ if $labels.plan }}, waiting for
        TerraformPlan {{ $labels.plan }} to be approved{{ end }}
      ||| % [q.objectText, q.inCluster]),
      description: text.fold(|||
        The Terraform state lock of %s is held by runner %s (operation %s, lock ID %s), whose pod
        is gone or finished. The lock is %s old and has been stale for at least 15 minutes: CAPTF
        clears it only when it starts this object's next Job, and none has started.{{ if
        $labels.plan }} TerraformPlan {{ $labels.plan }} of this object is Pending: its apply waits
        for approval, so no Job starts and the lock stays. Review the plan with `kubectl get tfplan
        -n {{ $labels.namespace }} {{ $labels.plan }} -o yaml`. Approving it applies the plan's
        changes to the infrastructure (the Job it starts also clears the lock): approve only a plan
        you have reviewed and want applied.{{ end }}
      ||| % [q.objectText, q.holder, q.operation, q.lockId, q.ageText]),
    },
  }],
}
