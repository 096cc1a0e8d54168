// CAPTFStateLockForeignOverdue: a foreign or unknown lock older than the object's effective
// lockTimeoutSeconds. CAPTF never force-unlocks such a lock, so every Job of the object waits
// and fails. Warning first, critical an hour later (the severity ladder,
// docs/decisions/alerts.md). The exporter computes `overdue` from the lock's age and the
// effective timeout, so the rule picks the overdue locks and adds who holds them; the value is
// the lock's age.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  local overdue = '(\n%s\n)' % text.indent(q.trusted('captf_state_lock_overdue == 1'), 2),
  local holder = '{{ if $labels.holder }}%s{{ else }}an unknown holder' % q.holder,
  local details = |||
    (class {{ $labels.class }}, operation {{ if $labels.operation }}%s{{ else }}unknown{{ end }},
    lock ID %s). CAPTF never force-unlocks a lock that is not its own: every Job of this object now
    waits out lockTimeoutSeconds and fails until the holder releases the lock or a person
    force-unlocks it.
  ||| % [q.operation, q.lockId],

  rules: [
    {
      alert: 'CAPTFStateLockForeignOverdue',
      expr: '%s\nand on (%s)\n%s\n' % [q.lockAge('class=~"foreign|unknown"'), q.object, overdue],
      'for': '1m',
      labels: { severity: 'warning' },
      annotations: {
        summary: text.fold(|||
          %s%s is locked by %s{{ end }} past its lockTimeoutSeconds
        ||| % [q.objectText, q.inCluster, holder]),
        description: text.fold(|||
          The Terraform state lock of %s has been held for %s by
          %s whose lock-info is missing or unreadable{{ end }}, longer than its lockTimeoutSeconds
          %s
          If it is a person's run that is still going (a long terraform apply from a workstation),
          let it finish; the alert turns critical if the lock is still held an hour past
          lockTimeoutSeconds.
        ||| % [q.objectText, q.ageText, holder, details]),
      },
    },
    // Still held an hour past lockTimeoutSeconds: no longer a run that takes its time but one
    // that died or was forgotten. Same labels as the warning, so an Alertmanager inhibition
    // (critical over warning) shows one of them. The age is compared with the effective timeout
    // plus 3600 s, so a missed scrape does not restart an hour of `for`.
    {
      alert: 'CAPTFStateLockForeignOverdue',
      expr: '(\n%s\n)\n> on (%s) group_left ()\n(\n%s\n  + 3600\n)\nand on (%s)\n%s\n' % [
        text.indent(q.lockAge('class=~"foreign|unknown"'), 2),
        q.object,
        text.indent(q.objectMax('captf_state_lock_timeout_seconds'), 2),
        q.object,
        overdue,
      ],
      'for': '1m',
      labels: { severity: 'critical' },
      annotations: {
        summary: text.fold(|||
          %s%s has been locked by %s{{ end }} for more than an hour past its lockTimeoutSeconds
        ||| % [q.objectText, q.inCluster, holder]),
        description: text.fold(|||
          The Terraform state lock of %s has been held for %s by
          %s whose lock-info is missing or unreadable{{ end }}, more than an hour longer than its
          lockTimeoutSeconds %s
          A run that takes this long is rare: find out whether the holder is still running before
          anything else.
        ||| % [q.objectText, q.ageText, holder, details]),
      },
    },
  ],
}
