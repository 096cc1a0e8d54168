// CAPTFStateLockVerdictMismatch: the exporter's verdict and CAPTF's own StateReadable condition
// have disagreed for longer than the exporter's --verdict-grace (the exporter decides that:
// mismatch 1) while no Job of the object was active. A Job active on any replica's view silences
// it: CAPTF does not look at the lock while a Job runs. The mismatch, the condition and the lock
// are read only from trusted replicas; the Job guard from every replica (a stale view can only
// silence, never fire).
//
// The labels say which way they disagree: CAPTF's condition as captf_status and captf_reason, the
// exporter's class and holder when the lock is held. Each is joined from a right side with exactly
// one series per object, so the join cannot fail as many-to-many while replicas disagree: topk
// keeps one, ranked so that the pick does not depend on series order (a False condition before
// Unknown before True, a foreign or unknown holder before an own one; clamp_max puts the value
// back to 1). An object without a condition or a held lock joins its own mismatch series instead,
// which leaves those labels out rather than dropping the alert. The value is 1.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  local o = q.object,
  // One series per object: `ranked` (a sum of `or`ed alternatives) or else the mismatch itself.
  local onePerObject(ranked) = |||
    clamp_max(
      topk by (%s) (
        1,
    %s
      ),
      1
    )
    or on (%s)
    group by (%s) (captf_state_lock_verdict_mismatch)
  ||| % [o, text.indent(ranked, 4), o, o],
  local condition(matcher, rank) =
    'group by (%s, status, reason) (\n%s\n)%s' % [
      o,
      text.indent(q.trusted('captf_state_lock_captf_condition%s' % matcher), 2),
      rank,
    ],
  local conditions = std.rstripChars(|||
    label_replace(
      label_replace(
    %s,
        "captf_status", "$1", "status", "(.*)"
      ),
      "captf_reason", "$1", "reason", "(.*)"
    )
  ||| % text.indent(std.join('\nor\n', [
    condition('{status="False"}', ' * 3'),
    condition('{status="Unknown"}', ' * 2'),
    condition('', ''),
  ]), 4), '\n'),
  local holder(matcher, rank) =
    'group by (%s, class, holder) (\n%s\n)%s' % [
      o,
      text.indent(q.trusted('captf_state_lock_info%s' % matcher), 2),
      rank,
    ],
  local holders = std.join('\nor\n', [holder('{class=~"foreign|unknown"}', ' * 2'), holder('', '')]),

  rules: [{
    alert: 'CAPTFStateLockVerdictMismatch',
    expr: |||
      (
      %s == 1
        unless on (%s)
        (captf_state_lock_job_active == 1)
      )
      * on (%s) group_left (captf_status, captf_reason)
      (
      %s)
      * on (%s) group_left (class, holder)
      (
      %s)
    ||| % [
      text.indent(q.objectMax('captf_state_lock_verdict_mismatch'), 2),
      o,
      o,
      text.indent(onePerObject(conditions), 2),
      o,
      text.indent(onePerObject(holders), 2),
    ],
    'for': '15m',
    labels: { severity: 'warning' },
    annotations: {
      summary: text.fold(|||
        captf-lock-exporter and CAPTF disagree about the state lock of %s%s
      ||| % [q.objectText, q.inCluster]),
      description: text.fold(|||
        {{- $locked := and (eq $labels.captf_status "False") (eq $labels.captf_reason "StateLocked") -}}
        {{- $foreign := eq $labels.class "foreign" "unknown" -}}
        CAPTF's StateReadable condition on %(object)s
        ({{ if $labels.captf_status }}{{ $labels.captf_status }}/{{ $labels.captf_reason }}{{ else }}not
        reported{{ end }}) and the exporter's verdict
        ({{ if $labels.class }}lock held by {{ if $labels.holder }}%(holder)s{{ else }}an
        unknown holder{{ end }}, class {{ $labels.class }}{{ else }}lock released{{ end }})
        have disagreed for longer than the exporter's --verdict-grace plus
        15 minutes, with no Job of the object active.
        {{- if and $locked (not $foreign) }} CAPTF reports a foreign lock,
        but the exporter sees {{ if $labels.class }}the object's own runner
        holding it{{ else }}no lock{{ end }}: usually CAPTF has not reconciled
        the object since the lock changed; or CAPTF's own-runner rules
        changed in an upgrade and the exporter needs a release that follows
        them.
        {{- else if and $foreign (eq $labels.captf_status "True") }} The
        exporter sees a lock CAPTF never force-unlocks, but CAPTF reports the
        state readable: CAPTF's rules changed in an upgrade (it now takes
        this holder for its own runner, and the exporter needs a release
        that follows them), or CAPTF is not reconciling the object.
        {{- else if and $foreign $locked }} Both report the lock as foreign,
        but CAPTF's condition message names another holder than the
        lock-info Who: CAPTF has not reconciled the object since this lock
        was taken, or it reads the holder differently.
        {{- end }} Run `captf-lock-exporter explain {{ $labels.kind }}/{{ $labels.name }}
        -n {{ $labels.namespace }}` to see both verdicts side by side, then
        follow the runbook.
      ||| % { object: q.objectText, holder: q.holder }),
    },
  }],
}
