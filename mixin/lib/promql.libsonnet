// The PromQL and annotation pieces the lock alerts share, for a given _config.
//
// Any number of exporter replicas may be scraped at once, each reporting every lock, so every
// rule aggregates away the per-target labels (instance, pod, container, endpoint, service, job):
// two replicas give one alert, never two. A lock series is read only from a replica (same
// cluster, job and instance) whose Lease watch is up now: a replica whose watch broke keeps
// exporting the locks it last saw.
local text = import 'text.libsonnet';

function(c) {
  local cl = c.clusterLabel,
  local indent = text.indent,

  // The labels of one object, and of one lock of it.
  object: '%s, namespace, kind, name' % cl,
  lock: self.object + ', class, holder, operation, lock_id',

  // `expr` read only from replicas whose Lease watch is up.
  trusted(expr): '%s\nand on (%s, job, instance) (captf_lock_exporter_watch_up{resource="leases"} == 1)' % [expr, cl],

  // One series per held lock of the classes `matcher` selects, deduplicated across replicas.
  lockInfo(matcher): 'max by (%s) (\n%s\n)' % [self.lock, indent(self.trusted('captf_state_lock_info{%s}' % matcher), 2)],

  // A lock's age: time() minus the earliest acquired timestamp any trusted replica reports (the
  // largest age; replicas differ only for `observed` ages), never below 0 (a runner whose clock
  // is ahead writes a Created in the future). One series per object.
  age: 'clamp_min(\n  time() - min by (%s) (\n%s\n  ),\n  0\n)' % [
    self.object,
    indent(self.trusted('captf_state_lock_acquired_timestamp_seconds'), 4),
  ],

  // lockInfo(matcher) with the lock's age as its value (the join is many-to-one: the age side has
  // one series per object).
  lockAge(matcher): '%s\n* on (%s) group_left ()\n%s' % [self.lockInfo(matcher), self.object, self.age],

  // Per-object maximum of a gauge over the trusted replicas.
  objectMax(metric): 'max by (%s) (\n%s\n)' % [self.object, indent(self.trusted(metric), 2)],

  // Annotation text.
  objectText: '{{ $labels.kind }} {{ $labels.namespace }}/{{ $labels.name }}',
  inCluster: '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % cl,
  // "at least " before an age when a replica counts it from when it first saw the lock.
  atLeast:
    '{{ with printf `captf_state_lock_acquired_timestamp_seconds{age_source="observed", '
    + '%s="%%s", namespace="%%s", kind="%%s", name="%%s"}` $labels.%s ' % [cl, cl]
    + '$labels.namespace $labels.kind $labels.name | query }}at least {{ end }}',
  ageText: self.atLeast + '{{ $value | humanizeDuration }}',
  holder: text.safe('$labels.holder'),
  operation: text.safe('$labels.operation'),
  lockId: text.safe('$labels.lock_id'),

  dashboardUrl:
    '%s/d/%s/%s?var-cluster={{ or $labels.%s "$__all" }}' % [c.grafanaUrl, c.dashboardUids.object, c.dashboardUids.object, cl]
    + '&var-namespace={{ $labels.namespace }}&var-kind={{ $labels.kind }}&var-name={{ $labels.name }}',
}
