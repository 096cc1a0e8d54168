local g = import '../lib/grafana.libsonnet';

function(c)
  // The queries' label filters: the cluster label of _config, and the variables.
  local filters = '%s=~"$cluster", namespace=~"$namespace", kind=~"$kind"' % c.clusterLabel;
  local q(s) = s % { cluster: c.clusterLabel, filters: filters };
  g.dashboard(c.dashboardUids.locks, 'CAPTF state locks', 'Terraform/OpenTofu state locks of CAPTF objects (captf-lock-exporter): who holds them, which are overdue, force-unlocks, exporter health.', c) + {
    templating: { list: [
      {
        name: 'datasource',
        label: 'Data source',
        type: 'datasource',
        query: 'prometheus',
        hide: 0,
        includeAll: false,
        multi: false,
        options: [],
        refresh: 1,
        regex: '',
        skipUrlSync: false,
      },
      {
        name: 'cluster',
        label: 'Cluster',
        description: "Management cluster (the `cluster` external label of a fleet's Prometheus servers). Hidden: with one cluster the series carry no such label and All (.*) matches them. In a fleet, show it in the dashboard settings and pick one cluster (docs/decisions/dashboards.md).",
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_lock_exporter_build_info, %(cluster)s)'),
        hide: 2,
        multi: true,
        includeAll: true,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
        allValue: '.*',
        current: {
          selected: true,
          text: ['All'],
          value: ['$__all'],
        },
      },
      {
        name: 'namespace',
        label: 'Namespace',
        description: 'Namespaces of known CAPTF objects; All also covers locks whose object is unknown.',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_state_lock_held{%(cluster)s=~"$cluster"}, namespace)'),
        hide: 0,
        multi: true,
        includeAll: true,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
        allValue: '.*',
        current: {
          selected: true,
          text: ['All'],
          value: ['$__all'],
        },
      },
      {
        name: 'kind',
        label: 'Kind',
        description: 'TerraformCluster, TerraformMachine, TerraformMachinePool.',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_state_lock_held{%(cluster)s=~"$cluster", namespace=~"$namespace"}, kind)'),
        hide: 0,
        multi: true,
        includeAll: true,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
        allValue: '.*',
        current: {
          selected: true,
          text: ['All'],
          value: ['$__all'],
        },
      },
      {
        name: 'job',
        label: 'Exporter job',
        description: 'Prometheus job that scrapes captf-lock-exporter (for up and scrape_duration_seconds).',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_lock_exporter_build_info{%(cluster)s=~"$cluster"}, job)'),
        hide: 0,
        multi: false,
        includeAll: false,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
      },
    ] },
    panels: [
      g.panel('stat',
              1,
              'Held state locks by holder class',
              { h: 5, w: 14, x: 0, y: 0 },
              "Held state locks per holder class, all namespaces (captf_state_locks_held has no namespace label; the variables do not narrow it). Summed over exporter installations (one per cluster, namespace and job), each counted once however many replicas it runs (max over its replicas): two installations holding 5 and 3 show 8, two replicas of one showing 5 each show 5.\n\n- **own_live**: held by a running runner pod of the object's own Job; nothing to do, later Jobs wait for it\n- **own_stale**: held by an own runner pod that is gone or finished; the next Job CAPTF starts for the object force-unlocks it\n- **foreign**: held by something that is not an own runner pod (a workstation, another object's pod); CAPTF never unlocks it, every Job waits lockTimeoutSeconds and fails\n- **unknown**: lock-info missing or unparseable, or Who has no host; treated like foreign\n- **own_unverified**: held by an own runner pod whose state the exporter could not read (API error); neither live nor stale",
              [
                g.target(q('sum(max by (%(cluster)s, namespace, job) (captf_state_locks_held{%(cluster)s=~"$cluster", class="own_live"}))'), 'A', legend='own_live'),
                g.target(q('sum(max by (%(cluster)s, namespace, job) (captf_state_locks_held{%(cluster)s=~"$cluster", class="own_stale"}))'), 'B', legend='own_stale'),
                g.target(q('sum(max by (%(cluster)s, namespace, job) (captf_state_locks_held{%(cluster)s=~"$cluster", class="foreign"}))'), 'C', legend='foreign'),
                g.target(q('sum(max by (%(cluster)s, namespace, job) (captf_state_locks_held{%(cluster)s=~"$cluster", class="unknown"}))'), 'D', legend='unknown'),
                g.target(q('sum(max by (%(cluster)s, namespace, job) (captf_state_locks_held{%(cluster)s=~"$cluster", class="own_unverified"}))'), 'E', legend='own_unverified'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'A',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'B',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'yellow',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'C',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'orange',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'D',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'orange',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'E',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'yellow',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
          ],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value_and_name',
        },
      },
      g.panel('stat',
              2,
              'Overdue foreign/unknown locks',
              { h: 5, w: 5, x: 14, y: 0 },
              "Foreign or unknown locks older than their object's effective lockTimeoutSeconds (captf_state_lock_overdue == 1), in the selected namespaces and kinds. Every Job of such an object now fails until a person force-unlocks the state; the table below lists them first.",
              [
                g.target(q('count(max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s} == 1)) or vector(0)'), 'A', legend='overdue'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
                {
                  color: 'red',
                  value: 1,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value',
        },
      },
      g.panel('stat',
              3,
              'Exporter',
              { h: 5, w: 5, x: 19, y: 0 },
              'Whether the numbers on this dashboard can be trusted, counted as the alerts count them. targets up: scrape targets of the exporter job that are up. watches down: watches (per installation and resource) that no replica has synced, the condition of CAPTFLockExporterWatchDown. exporters down: installations (cluster, namespace, job) none of whose targets is up, the condition of CAPTFLockExporterDown. One failing replica of two is neither: the other still reports every lock.',
              [
                g.target(q('sum(up{%(cluster)s=~"$cluster", job="$job"}) or vector(0)'), 'A', legend='targets up'),
                g.target(q('count(max by (%(cluster)s, namespace, job, resource) (captf_lock_exporter_watch_up{%(cluster)s=~"$cluster"}) == 0) or vector(0)'), 'B', legend='watches down'),
                g.target(q('count(max by (%(cluster)s, namespace, job) (up{%(cluster)s=~"$cluster", job="$job"}) == 0) or vector(0)'), 'C', legend='exporters down'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'A',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'red',
                        value: null,
                      },
                      {
                        color: 'green',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'B',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'red',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'C',
              },
              properties: [
                {
                  id: 'thresholds',
                  value: {
                    mode: 'absolute',
                    steps: [
                      {
                        color: 'green',
                        value: null,
                      },
                      {
                        color: 'red',
                        value: 1,
                      },
                    ],
                  },
                },
              ],
            },
          ],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value_and_name',
        },
      },
      g.panel('table',
              4,
              'Held state locks (worst 100 first)',
              { h: 10, w: 24, x: 0, y: 5 },
              "The 100 worst held state locks in the selected namespaces and kinds: overdue ones first, then the oldest. Each query returns at most these 100 locks (topk of the sort key, the others joined to it with `and on`), so the table stays cheap at 100k objects; the stats above count every lock. overdue: a foreign/unknown lock older than its timeout; its object's Jobs fail until someone runs a force-unlock. age_source=observed means lock-info Created was unusable and age counts from when the exporter first saw the lock (a lower bound). Click a name for the object's lock history.",
              [
                g.target(q('max by (%(cluster)s, namespace, kind, name, class, holder, operation, lock_id) (captf_state_lock_info{%(filters)s}) and on (%(cluster)s, namespace, kind, name) topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) * 1e9 + clamp_min(time() - min by (%(cluster)s, namespace, kind, name) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0))'), 'A', format='table'),
                g.target(q('clamp_min(time() - min by (%(cluster)s, namespace, kind, name, age_source) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0) and on (%(cluster)s, namespace, kind, name) topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) * 1e9 + clamp_min(time() - min by (%(cluster)s, namespace, kind, name) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0))'), 'B', format='table'),
                g.target(q('max by (%(cluster)s, namespace, kind, name) (captf_state_lock_timeout_seconds{%(filters)s}) and on (%(cluster)s, namespace, kind, name) topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) * 1e9 + clamp_min(time() - min by (%(cluster)s, namespace, kind, name) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0))'), 'C', format='table'),
                g.target(q('max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) and on (%(cluster)s, namespace, kind, name) topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) * 1e9 + clamp_min(time() - min by (%(cluster)s, namespace, kind, name) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0))'), 'D', format='table'),
                g.target(q('topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_overdue{%(filters)s}) * 1e9 + clamp_min(time() - min by (%(cluster)s, namespace, kind, name) (captf_state_lock_acquired_timestamp_seconds{%(filters)s}), 0))'), 'E', format='table'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              filterable: true,
            },
            noValue: 'No state lock is held',
          },
          overrides: [
            {
              matcher: {
                id: 'byName',
                options: 'age',
              },
              properties: [
                {
                  id: 'unit',
                  value: 's',
                },
                {
                  id: 'decimals',
                  value: 0,
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'timeout',
              },
              properties: [
                {
                  id: 'unit',
                  value: 's',
                },
                {
                  id: 'decimals',
                  value: 0,
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'overdue',
              },
              properties: [
                {
                  id: 'mappings',
                  value: [
                    {
                      type: 'value',
                      options: {
                        '0': {
                          index: 0,
                          text: 'no',
                          color: 'transparent',
                        },
                        '1': {
                          index: 1,
                          text: 'OVERDUE',
                          color: 'red',
                        },
                      },
                    },
                  ],
                },
                {
                  id: 'custom.cellOptions',
                  value: {
                    type: 'color-background',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'class',
              },
              properties: [
                {
                  id: 'mappings',
                  value: [
                    {
                      type: 'value',
                      options: {
                        own_live: {
                          index: 0,
                          text: 'own_live',
                          color: 'green',
                        },
                        own_stale: {
                          index: 1,
                          text: 'own_stale',
                          color: 'yellow',
                        },
                        foreign: {
                          index: 2,
                          text: 'foreign',
                          color: 'orange',
                        },
                        unknown: {
                          index: 3,
                          text: 'unknown',
                          color: 'orange',
                        },
                        own_unverified: {
                          index: 4,
                          text: 'own_unverified',
                          color: 'yellow',
                        },
                      },
                    },
                  ],
                },
                {
                  id: 'custom.cellOptions',
                  value: {
                    type: 'color-text',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'name',
              },
              properties: [
                {
                  id: 'links',
                  value: [
                    {
                      title: 'Lock history of ${__data.fields.kind} ${__data.fields.namespace}/${__data.fields.name}',
                      url: '/d/captf-state-lock-object/captf-state-lock-object?${datasource:queryparam}&${cluster:queryparam}&var-namespace=${__data.fields.namespace}&var-kind=${__data.fields.kind}&var-name=${__data.fields.name}&${__url_time_range}',
                    },
                  ],
                },
              ],
            },
          ],
        },
        options+: {
          sortBy: [],
        },
        transformations: [
          {
            id: 'merge',
            options: {},
          },
          {
            id: 'sortBy',
            options: {
              fields: {},
              sort: [
                {
                  field: 'Value #E',
                  desc: true,
                },
              ],
            },
          },
          {
            id: 'organize',
            options: {
              excludeByName: {
                Time: true,
                'Value #A': true,
                'Value #E': true,
              },
              includeByName: {},
              indexByName: {
                [c.clusterLabel]: 0,
                namespace: 1,
                kind: 2,
                name: 3,
                class: 4,
                'Value #D': 5,
                holder: 6,
                operation: 7,
                'Value #B': 8,
                'Value #C': 9,
                age_source: 10,
                lock_id: 11,
              },
              renameByName: {
                'Value #B': 'age',
                'Value #C': 'timeout',
                'Value #D': 'overdue',
              },
            },
          },
        ],
      },
      g.panel('timeseries',
              5,
              'Held state locks per class',
              { h: 8, w: 12, x: 0, y: 15 },
              'captf_state_locks_held over time, all namespaces (the metric has no namespace label). Summed over exporter installations (cluster, namespace, job), max over the replicas of each.',
              [
                g.target(q('sum by (class) (max by (%(cluster)s, namespace, job, class) (captf_state_locks_held{%(cluster)s=~"$cluster"}))'), 'A', legend='{{class}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'line',
              fillOpacity: 10,
              stacking+: {
                mode: 'none',
              },
            },
            unit: 'short',
            decimals: 0,
          },
          overrides: [
            {
              matcher: {
                id: 'byName',
                options: 'own_live',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'green',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'own_stale',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'yellow',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'foreign',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'orange',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'unknown',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'orange',
                  },
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'own_unverified',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'yellow',
                  },
                },
              ],
            },
          ],
        },
      },
      g.panel('timeseries',
              6,
              'Force-unlocks per namespace',
              { h: 8, w: 12, x: 12, y: 15 },
              'Force-unlocks of stale own locks (ForceUnlocked events) per namespace, one bar per step: each bar is how much the counter grew since the previous bar (its value now minus its value one $__interval ago), so one event is counted in exactly one bar and the bars add up to the events in the time range. Each exporter replica counts every event, so the counter is the max over replicas per object, then summed. A counter reset (exporter restart) counts 0 in its bar.',
              [
                g.target(q('sum by (namespace) (clamp_min(max by (%(cluster)s, namespace, kind, name) (captf_state_lock_force_unlocks_total{%(filters)s}) - max by (%(cluster)s, namespace, kind, name) (captf_state_lock_force_unlocks_total{%(filters)s} offset $__interval), 0) or 0 * max by (%(cluster)s, namespace, kind, name) (captf_state_lock_force_unlocks_total{%(filters)s}))'), 'A', legend='{{namespace}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'bars',
              fillOpacity: 60,
              stacking+: {
                mode: 'normal',
              },
            },
            unit: 'short',
          },
          overrides: [],
        },
      },
      g.panel('table',
              7,
              'Last force-unlock per object (newest 100)',
              { h: 7, w: 24, x: 0, y: 23 },
              'When the exporter last saw a ForceUnlocked event per object (also events older than the exporter), the 100 newest, newest first.',
              [
                g.target(q('topk(100, max by (%(cluster)s, namespace, kind, name) (captf_state_lock_last_force_unlock_timestamp_seconds{%(filters)s} > 0)) * 1000'), 'A', format='table'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              filterable: true,
            },
            noValue: 'No force-unlock seen',
          },
          overrides: [
            {
              matcher: {
                id: 'byName',
                options: 'last force-unlock',
              },
              properties: [
                {
                  id: 'unit',
                  value: 'dateTimeAsIso',
                },
              ],
            },
            {
              matcher: {
                id: 'byName',
                options: 'name',
              },
              properties: [
                {
                  id: 'links',
                  value: [
                    {
                      title: 'Lock history of ${__data.fields.kind} ${__data.fields.namespace}/${__data.fields.name}',
                      url: '/d/captf-state-lock-object/captf-state-lock-object?${datasource:queryparam}&${cluster:queryparam}&var-namespace=${__data.fields.namespace}&var-kind=${__data.fields.kind}&var-name=${__data.fields.name}&${__url_time_range}',
                    },
                  ],
                },
              ],
            },
          ],
        },
        options+: {
          sortBy: [],
        },
        transformations: [
          {
            id: 'sortBy',
            options: {
              fields: {},
              sort: [
                {
                  field: 'Value',
                  desc: true,
                },
              ],
            },
          },
          {
            id: 'organize',
            options: {
              excludeByName: {
                Time: true,
              },
              includeByName: {},
              indexByName: {
                [c.clusterLabel]: 0,
                namespace: 1,
                kind: 2,
                name: 3,
                Value: 4,
              },
              renameByName: {
                Value: 'last force-unlock',
              },
            },
          },
        ],
      },
      g.row(8, 'Exporter health', {
        h: 1,
        w: 24,
        x: 0,
        y: 30,
      }),
      g.panel('stat',
              9,
              'Watches synced',
              { h: 6, w: 8, x: 0, y: 31 },
              "Per watched resource: synced when at least one replica of every exporter installation has the watch synced (max over an installation's replicas, as CAPTFLockExporterWatchDown takes it), DOWN when some installation has no replica with it synced: the condition that alert watches; a replica whose watch broke while another's is fine is not DOWN, the other reports every lock. A resource left out with --skip-resources has no series and is not shown.",
              [
                g.target(q('min by (resource) (max by (%(cluster)s, namespace, job, resource) (captf_lock_exporter_watch_up{%(cluster)s=~"$cluster"}))'), 'A', legend='{{resource}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '0': {
                    index: 0,
                    text: 'DOWN',
                    color: 'red',
                  },
                  '1': {
                    index: 1,
                    text: 'synced',
                    color: 'green',
                  },
                },
              },
            ],
            thresholds+: {
              steps: [
                {
                  color: 'red',
                  value: null,
                },
                {
                  color: 'green',
                  value: 1,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value_and_name',
        },
      },
      g.panel('timeseries',
              10,
              'Watch errors',
              { h: 6, w: 8, x: 8, y: 31 },
              'Watch errors per resource and reason, all replicas.',
              [
                g.target(q('sum by (resource, reason) (rate(captf_lock_exporter_watch_errors_total{%(cluster)s=~"$cluster"}[$__rate_interval]))'), 'A', legend='{{resource}} {{reason}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'line',
              fillOpacity: 10,
              stacking+: {
                mode: 'none',
              },
            },
            unit: 'ops',
          },
          overrides: [],
        },
      },
      g.panel('timeseries',
              11,
              'Watch events',
              { h: 6, w: 8, x: 16, y: 31 },
              'Watch events received per resource, all replicas.',
              [
                g.target(q('sum by (resource) (rate(captf_lock_exporter_watch_events_total{%(cluster)s=~"$cluster"}[$__rate_interval]))'), 'A', legend='{{resource}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'line',
              fillOpacity: 10,
              stacking+: {
                mode: 'none',
              },
            },
            unit: 'ops',
          },
          overrides: [],
        },
      },
      g.panel('timeseries',
              12,
              'Live pod reads by result',
              { h: 6, w: 8, x: 0, y: 37 },
              'Live pod reads the exporter makes to confirm a cache miss before reporting own_stale, by result. error readings make locks own_unverified.',
              [
                g.target(q('sum by (result) (rate(captf_lock_exporter_pod_reads_total{%(cluster)s=~"$cluster"}[$__rate_interval]))'), 'A', legend='{{result}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'line',
              fillOpacity: 10,
              stacking+: {
                mode: 'none',
              },
            },
            unit: 'ops',
          },
          overrides: [
            {
              matcher: {
                id: 'byName',
                options: 'error',
              },
              properties: [
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'red',
                  },
                },
              ],
            },
          ],
        },
      },
      g.panel('stat',
              13,
              'Scrape targets',
              { h: 6, w: 4, x: 8, y: 37 },
              'up for each target of the exporter\'s scrape job (variable job: the job that serves captf_lock_exporter_build_info). A failing target is one replica; the exporter is down (CAPTFLockExporterDown, "exporters down" at the top) only when every target of an installation fails.',
              [
                g.target(q('up{%(cluster)s=~"$cluster", job="$job"}'), 'A', legend='{{instance}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '0': {
                    index: 0,
                    text: 'failing',
                    color: 'orange',
                  },
                  '1': {
                    index: 1,
                    text: 'up',
                    color: 'green',
                  },
                },
              },
            ],
            thresholds+: {
              steps: [
                {
                  color: 'orange',
                  value: null,
                },
                {
                  color: 'green',
                  value: 1,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value_and_name',
        },
      },
      g.panel('timeseries',
              14,
              'Scrape duration',
              { h: 6, w: 8, x: 12, y: 37 },
              'scrape_duration_seconds of each exporter target. A scrape is computed from memory; a rising duration means a large lock set or a starved process.',
              [
                g.target(q('scrape_duration_seconds{%(cluster)s=~"$cluster", job="$job"}'), 'A', legend='{{instance}}', instant=false),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              drawStyle: 'line',
              fillOpacity: 10,
              stacking+: {
                mode: 'none',
              },
            },
            unit: 's',
          },
          overrides: [],
        },
      },
      g.panel('stat',
              15,
              'Exporter versions',
              { h: 6, w: 4, x: 20, y: 37 },
              'Running exporter versions and how many replicas run each.',
              [
                g.target(q('count by (version) (captf_lock_exporter_build_info{%(cluster)s=~"$cluster"})'), 'A', legend='{{version}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'blue',
            },
            mappings: [],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
              ],
            },
            unit: 'none',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'value',
          textMode: 'value_and_name',
        },
      },
      g.panel('stat',
              16,
              'Data age per watch',
              { h: 5, w: 24, x: 0, y: 43 },
              "How old the newest data of each watch is: now minus captf_lock_exporter_watch_last_success_timestamp_seconds (the last successful list, watch start, event or bookmark). Per installation the freshest replica counts (max of the timestamp, as the alerts trust a replica whose watch is up); across installations the oldest is shown. A resource with traffic (the Leases: the API server's own leases make its watch cache send bookmarks about once a minute) stays within a minute or two; a resource nothing writes gets no bookmarks, and its last success moves only when its watch is renewed, every 5 to 10 minutes (--watch-timeout); whether a watch is healthy is watch_up's answer, not this age. Yellow from 11 minutes (past the longest watch timeout), red from 20. A watch that never succeeded has no timestamp and no value here (Watches synced shows it DOWN).",
              [
                g.target(q('max by (resource) (time() - max by (%(cluster)s, namespace, job, resource) (captf_lock_exporter_watch_last_success_timestamp_seconds{%(cluster)s=~"$cluster"} > 0))'), 'A', legend='{{resource}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'thresholds',
            },
            mappings: [],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
                {
                  color: 'yellow',
                  value: 660,
                },
                {
                  color: 'red',
                  value: 1200,
                },
              ],
            },
            unit: 's',
            decimals: 0,
          },
          overrides: [],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value_and_name',
        },
      },
    ],
  }
