// CAPTFStateLockHolderNodeLost: an own_live lock whose runner pod's node has been lost for 5
// minutes (captf_state_lock_holder_node_lost_timestamp_seconds: the node not Ready or
// unreachable, the Node deleted, or the pod terminating past its grace period with no kubelet to
// confirm it). CAPTF counts that pod alive and never force-unlocks: without a person, the lock
// stays until the Node object goes (docs/decisions/lost-node.md). The value is how long the
// evidence has held, from the earliest start any trusted replica reports; the threshold counts
// from that start, not from the first evaluation, so an exporter or Prometheus restart does not
// delay the page. One alert per lock, node and reason across replicas.
local text = import '../lib/text.libsonnet';

function(c) {
  local q = (import '../lib/promql.libsonnet')(c),
  local by = q.object + ', node, reason',
  rules: [{
    alert: 'CAPTFStateLockHolderNodeLost',
    expr: 'time() - min by (%s) (\n%s\n)\n> 300\n' % [
      by,
      text.indent(q.trusted('captf_state_lock_holder_node_lost_timestamp_seconds'), 2),
    ],
    'for': '1m',
    labels: { severity: 'warning' },
    annotations: {
      summary: 'The runner holding the state lock of %s%s is on lost node {{ $labels.node }}' % [
        q.objectText,
        q.inCluster,
      ],
      description: text.fold(|||
        The own runner pod that holds the Terraform state lock of %s is on node {{ $labels.node }},
        lost for {{ $value | humanizeDuration }} ({{ $labels.reason }}). No kubelet confirms the
        runner's end, so CAPTF counts the pod alive and never force-unlocks: every Job of this
        object waits out lockTimeoutSeconds and fails until the pod is gone. Confirm the node is
        down or fenced, then apply the out-of-service taint to it (or delete the dead Node): the
        pod is removed, the lock turns own_stale and CAPTF's next Job force-unlocks it. Never
        force-unlock or force-delete while the node may still run the pod.
      ||| % [q.objectText]),
    },
  }],
}
