{
  grafanaDashboards+:: {
    'captf-state-locks.json': (import 'captf-state-locks.libsonnet')($._config),
    'captf-state-lock-object.json': (import 'captf-state-lock-object.libsonnet')($._config),
  },
}
