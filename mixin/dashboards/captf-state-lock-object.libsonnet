local g = import '../lib/grafana.libsonnet';

function(c)
  // The queries' label filters: the cluster label of _config, and the variables.
  local object = '%s=~"$cluster", namespace="$namespace", kind="$kind", name="$name"' % c.clusterLabel;
  local q(s) = s % { cluster: c.clusterLabel, object: object };
  g.dashboard(c.dashboardUids.object, 'CAPTF state lock: object', "History of one CAPTF object's Terraform/OpenTofu state lock: holder and class over time, age against its timeout and deadline, force-unlocks; and CAPTF's own view of it: its StateReadable condition, active Job, pending TerraformPlan and force-unlock counter.", c) + {
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
        description: 'Namespace of the object.',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_state_lock_held{%(cluster)s=~"$cluster"}, namespace)'),
        hide: 0,
        multi: false,
        includeAll: false,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
      },
      {
        name: 'kind',
        label: 'Kind',
        description: 'Kind of the object.',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_state_lock_held{%(cluster)s=~"$cluster", namespace="$namespace"}, kind)'),
        hide: 0,
        multi: false,
        includeAll: false,
        options: [],
        refresh: 2,
        regex: '',
        skipUrlSync: false,
        sort: 1,
      },
      {
        name: 'name',
        label: 'Name',
        description: 'Name of the object.',
        type: 'query',
        datasource: g.ds,
        query: q('label_values(captf_state_lock_held{%(cluster)s=~"$cluster", namespace="$namespace", kind="$kind"}, name)'),
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
              'Lock',
              { h: 4, w: 4, x: 0, y: 0 },
              "Whether the object's state lock is held (captf_state_lock_held). An object with nothing to tell (its lock free, nothing else) has no series: shown as free.",
              [
                g.target(q('max(captf_state_lock_held{%(object)s}) or on () vector(0)'), 'A', legend='held'),
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
                    text: 'free',
                    color: 'green',
                  },
                  '1': {
                    index: 1,
                    text: 'HELD',
                    color: 'blue',
                  },
                },
              },
            ],
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
          colorMode: 'background',
          textMode: 'value',
        },
      },
      g.panel('stat',
              2,
              'Holder class',
              { h: 4, w: 4, x: 4, y: 0 },
              "- **own_live**: held by a running runner pod of the object's own Job; nothing to do, later Jobs wait for it\n- **own_stale**: held by an own runner pod that is gone or finished; the next Job CAPTF starts for the object force-unlocks it\n- **foreign**: held by something that is not an own runner pod (a workstation, another object's pod); CAPTF never unlocks it, every Job waits lockTimeoutSeconds and fails\n- **unknown**: lock-info missing or unparseable, or Who has no host; treated like foreign\n- **own_unverified**: held by an own runner pod whose state the exporter could not read (API error); neither live nor stale",
              [
                g.target(q('max by (class) (captf_state_lock_info{%(object)s})'), 'A', legend='{{class}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
            noValue: 'not held',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'value',
          textMode: 'name',
        },
      },
      g.panel('stat',
              3,
              'Lock age',
              { h: 4, w: 4, x: 8, y: 0 },
              'Now minus lock-info Created (or since the exporter first saw the lock when Created is unusable).',
              [
                g.target(q('clamp_min(time() - min(captf_state_lock_acquired_timestamp_seconds{%(object)s}), 0)'), 'A', legend='age'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
            unit: 's',
            noValue: 'not held',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'value',
          textMode: 'value',
        },
      },
      g.panel('stat',
              4,
              'Lock timeout',
              { h: 4, w: 4, x: 12, y: 0 },
              'Effective lockTimeoutSeconds: a foreign/unknown lock older than this is overdue.',
              [
                g.target(q('max(captf_state_lock_timeout_seconds{%(object)s})'), 'A', legend='timeout'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
            unit: 's',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'value',
          textMode: 'value',
        },
      },
      g.panel('stat',
              5,
              'Overdue',
              { h: 4, w: 4, x: 16, y: 0 },
              'A foreign/unknown lock older than the lock timeout: every Job of the object fails until someone force-unlocks.',
              [
                g.target(q('max(captf_state_lock_overdue{%(object)s})'), 'A', legend='overdue'),
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
                    text: 'no',
                    color: 'green',
                  },
                  '1': {
                    index: 1,
                    text: 'OVERDUE',
                    color: 'red',
                  },
                },
              },
            ],
            thresholds+: {
              steps: [
                {
                  color: 'green',
                  value: null,
                },
              ],
            },
            unit: 'none',
            noValue: 'not held',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'background',
          textMode: 'value',
        },
      },
      g.panel('stat',
              6,
              'Last force-unlock',
              { h: 4, w: 4, x: 20, y: 0 },
              'When the exporter last saw a ForceUnlocked event for this object.',
              [
                g.target(q('max(captf_state_lock_last_force_unlock_timestamp_seconds{%(object)s} > 0) * 1000'), 'A', legend='last'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
            unit: 'dateTimeFromNow',
            noValue: 'never seen',
          },
          overrides: [],
        },
        options+: {
          colorMode: 'value',
          textMode: 'value',
        },
      },
      g.panel('table',
              7,
              'Current lock',
              { h: 4, w: 24, x: 0, y: 4 },
              'The lock as the exporter reads it: holder (lock-info Who), operation, lock ID, Terraform/OpenTofu version, Created.',
              [
                g.target(q('max by (namespace, kind, name, class, holder, operation, lock_id, version) (captf_state_lock_info{%(object)s})'), 'A', format='table'),
                g.target(q('clamp_min(time() - min by (namespace, kind, name, age_source) (captf_state_lock_acquired_timestamp_seconds{%(object)s}), 0)'), 'B', format='table'),
                g.target(q('max by (namespace, kind, name) (captf_state_lock_created_timestamp_seconds{%(object)s}) * 1000'), 'C', format='table'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            custom+: {
              filterable: true,
            },
            noValue: 'Not held',
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
                options: 'created',
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
            id: 'organize',
            options: {
              excludeByName: {
                Time: true,
                'Value #A': true,
                namespace: true,
                kind: true,
                name: true,
              },
              includeByName: {},
              indexByName: {
                class: 0,
                holder: 1,
                operation: 2,
                'Value #B': 3,
                age_source: 4,
                'Value #C': 5,
                lock_id: 6,
                version: 7,
              },
              renameByName: {
                'Value #B': 'age',
                'Value #C': 'created',
              },
            },
          },
        ],
      },
      g.panel('timeseries',
              8,
              'Lock age against its limits',
              { h: 8, w: 24, x: 0, y: 8 },
              'Age of the held lock, the lock timeout (a foreign/unknown lock past it is overdue) and activeDeadlineSeconds + 600 s grace (an own_live lock past it is held too long).',
              [
                g.target(q('clamp_min(time() - min(captf_state_lock_acquired_timestamp_seconds{%(object)s}), 0)'), 'A', legend='age', instant=false),
                g.target(q('max(captf_state_lock_timeout_seconds{%(object)s})'), 'B', legend='lock timeout', instant=false),
                g.target(q('max(captf_state_lock_deadline_seconds{%(object)s}) + 600'), 'C', legend='deadline + 600 s grace', instant=false),
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
          overrides: [
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'B',
              },
              properties: [
                {
                  id: 'custom.lineStyle',
                  value: {
                    fill: 'dash',
                    dash: [10, 10],
                  },
                },
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'red',
                  },
                },
                {
                  id: 'custom.fillOpacity',
                  value: 0,
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
                  id: 'custom.lineStyle',
                  value: {
                    fill: 'dash',
                    dash: [10, 10],
                  },
                },
                {
                  id: 'color',
                  value: {
                    mode: 'fixed',
                    fixedColor: 'orange',
                  },
                },
                {
                  id: 'custom.fillOpacity',
                  value: 0,
                },
              ],
            },
          ],
        },
      },
      g.panel('state-timeline',
              9,
              'Holder and overdue over time',
              { h: 7, w: 24, x: 0, y: 16 },
              'Which holder held the lock in which class, and when it was overdue.',
              [
                g.target(q('max by (class, holder) (captf_state_lock_info{%(object)s})'), 'A', legend='{{class}} {{holder}}', instant=false),
                g.target(q('max(captf_state_lock_overdue{%(object)s})'), 'B', legend='overdue', instant=false),
              ]) + {
        fieldConfig: {
          defaults: {
            color: {
              mode: 'thresholds',
            },
            custom: {
              fillOpacity: 70,
              lineWidth: 0,
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '1': {
                    index: 0,
                    text: 'held',
                    color: 'blue',
                  },
                },
              },
            ],
            thresholds: {
              mode: 'absolute',
              steps: [
                {
                  color: 'blue',
                  value: null,
                },
              ],
            },
          },
          overrides: [
            {
              matcher: {
                id: 'byFrameRefID',
                options: 'B',
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
                          color: 'green',
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
              ],
            },
          ],
        },
        options: {
          alignValue: 'left',
          legend: {
            calcs: [],
            displayMode: 'list',
            placement: 'bottom',
            showLegend: false,
          },
          mergeValues: true,
          rowHeight: 0.9,
          showValue: 'auto',
          tooltip: {
            mode: 'single',
            sort: 'none',
          },
        },
      },
      g.panel('timeseries',
              10,
              'Force-unlocks',
              { h: 6, w: 24, x: 0, y: 23 },
              "Force-unlocks of this object's stale own lock (ForceUnlocked events), one bar per step: how much the counter grew since the previous bar (max over exporter replicas, now minus one $__interval ago), so one event shows in one bar.",
              [
                g.target(q('clamp_min(max(captf_state_lock_force_unlocks_total{%(object)s}) - max(captf_state_lock_force_unlocks_total{%(object)s} offset $__interval), 0) or 0 * max(captf_state_lock_force_unlocks_total{%(object)s})'), 'A', legend='force-unlocks', instant=false),
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
      g.row(11, "CAPTF's own view: its condition, Jobs, plans and force-unlock counter", {
        h: 1,
        w: 24,
        x: 0,
        y: 29,
      }),
      g.panel('stat',
              12,
              "CAPTF's StateReadable",
              { h: 4, w: 6, x: 0, y: 30 },
              'CAPTF\'s own StateReadable condition on the object as CAPTF last wrote it (status and reason). CAPTF writes it only at a reconcile while no Job of the object runs, so it can lag the lock. False StateLocked: CAPTF sees a foreign holder and every Job waits lockTimeoutSeconds and fails. "not reported": the object has no StateReadable condition, or the exporter does not export it.',
              [
                g.target(q('max by (status, reason) (captf_state_lock_captf_condition{%(object)s}) or on () label_replace(vector(0), "status", "not reported", "", "")'), 'A', legend='{{status}} {{reason}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
          textMode: 'name',
        },
      },
      g.panel('stat',
              13,
              'Verdict',
              { h: 4, w: 6, x: 6, y: 30 },
              'Whether the exporter\'s class of the lock and CAPTF\'s StateReadable condition agree. "disagree" (captf_state_lock_verdict_mismatch 1): they have disagreed for longer than the exporter\'s --verdict-grace with no Job active; CAPTFStateLockVerdictMismatch fires 15 minutes later. `captf-lock-exporter explain <kind>/<name> -n <namespace>` shows both side by side. "not exported": the exporter is older than this series.',
              [
                g.target(q('max(captf_state_lock_verdict_mismatch{%(object)s}) or on () vector(-1)'), 'A', legend='verdict'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '0': {
                    index: 0,
                    text: 'agree',
                    color: 'green',
                  },
                  '1': {
                    index: 1,
                    text: 'disagree',
                    color: 'orange',
                  },
                  '-1': {
                    index: 2,
                    text: 'not exported',
                    color: 'text',
                  },
                },
              },
            ],
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
          textMode: 'value',
        },
      },
      g.panel('stat',
              14,
              'CAPTF Job active',
              { h: 4, w: 6, x: 12, y: 30 },
              "Whether the object's status.activeJob is set. While a Job runs CAPTF does not look at the lock, so its condition may still describe an earlier one, and no verdict mismatch is reported.",
              [
                g.target(q('max(captf_state_lock_job_active{%(object)s}) or on () vector(0)'), 'A', legend='job'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '0': {
                    index: 0,
                    text: 'no Job',
                    color: 'text',
                  },
                  '1': {
                    index: 1,
                    text: 'Job running',
                    color: 'blue',
                  },
                },
              },
            ],
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
          textMode: 'value',
        },
      },
      g.panel('stat',
              15,
              'Pending TerraformPlan',
              { h: 4, w: 6, x: 18, y: 30 },
              "A TerraformPlan in phase Pending whose spec.targetRef names this object (TerraformCluster or TerraformMachinePool). While it waits for approval nothing of the object runs, so an own stale lock stays. Review it with `kubectl get tfplan -n <namespace> <plan> -o yaml`. Approving it applies the plan's changes; approve only a plan you want applied, never to clear a lock.",
              [
                g.target(q('max by (plan) (captf_state_lock_plan_pending{%(object)s}) or on () label_replace(vector(0), "plan", "none pending", "", "")'), 'A', legend='{{plan}}'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
          textMode: 'name',
        },
      },
      g.panel('table',
              16,
              "Force-unlocks per kind in the time range: CAPTF's controller and the exporter",
              { h: 6, w: 16, x: 0, y: 34 },
              'Every kind, not only this object\'s. "CAPTF controller" is the increase of CAPTF\'s own captf_lock_force_unlocks_total{kind} (per controller process, reset on restart); it needs the controller manager\'s metrics endpoint scraped. Without it, or before the controller\'s first force-unlock since it started, the column shows 0 for every kind the exporter knows. "exporter" is the increase of the exporter\'s per-object counter summed by kind. The two should match; the exporter\'s is the one per object.',
              [
                g.target(q('sum by (kind) (increase(captf_lock_force_unlocks_total{%(cluster)s=~"$cluster", kind=~".*"}[$__range])) or on (kind) 0 * sum by (kind) (max by (%(cluster)s, namespace, kind, name) (increase(captf_state_lock_force_unlocks_total{%(cluster)s=~"$cluster", namespace=~".*", kind=~".*", name=~".*"}[$__range])))'), 'A', format='table'),
                g.target(q('sum by (kind) (max by (%(cluster)s, namespace, kind, name) (increase(captf_state_lock_force_unlocks_total{%(cluster)s=~"$cluster", namespace=~".*", kind=~".*", name=~".*"}[$__range])))'), 'B', format='table'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            decimals: 0,
          },
          overrides: [],
        },
        transformations: [
          {
            id: 'merge',
            options: {},
          },
          {
            id: 'organize',
            options: {
              excludeByName: {
                Time: true,
              },
              includeByName: {},
              indexByName: {
                kind: 0,
                'Value #A': 1,
                'Value #B': 2,
              },
              renameByName: {
                'Value #A': 'CAPTF controller',
                'Value #B': 'exporter',
              },
            },
          },
        ],
      },
      g.panel('stat',
              17,
              'CAPTF controller series',
              { h: 6, w: 4, x: 16, y: 34 },
              'How many captf_lock_force_unlocks_total{kind} series Prometheus has from CAPTF\'s controller. "none": its metrics endpoint is not scraped (scrape the manager\'s metrics service, e.g. with CAPTF\'s config/prometheus ServiceMonitor), or it has not force-unlocked anything since it started (its counter appears at the first one). In both cases the CAPTF column beside shows 0.',
              [
                g.target(q('count(captf_lock_force_unlocks_total{%(cluster)s=~"$cluster", kind=~".*"}) or vector(0)'), 'A', legend='series'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
            },
            mappings: [
              {
                type: 'value',
                options: {
                  '0': {
                    index: 0,
                    text: 'none',
                    color: 'text',
                  },
                },
              },
            ],
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
          textMode: 'value',
        },
      },
      g.panel('stat',
              18,
              'Objects with a verdict mismatch',
              { h: 6, w: 4, x: 20, y: 34 },
              'Known objects of every namespace and kind whose exporter verdict and CAPTF condition disagree (captf_state_lock_verdict_mismatch 1). One object alone points at that object; many at once at CAPTF not reconciling, or at a CAPTF upgrade whose lock rules the exporter does not follow yet.',
              [
                g.target(q('count(max by (%(cluster)s, namespace, kind, name) (captf_state_lock_verdict_mismatch{%(cluster)s=~"$cluster", namespace=~".*", kind=~".*", name=~".*"} == 1)) or vector(0)'), 'A', legend='objects'),
              ]) + {
        fieldConfig+: {
          defaults+: {
            color+: {
              mode: 'fixed',
              fixedColor: 'text',
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
          textMode: 'value',
        },
      },
    ],
  }
