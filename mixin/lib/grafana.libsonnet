// Grafana dashboard and panel constructors the two dashboards share: a panel is its type's
// defaults (panel-defaults.libsonnet) plus what it sets itself.
local defaults = import 'panel-defaults.libsonnet';

{
  // Every query reads the data source the dashboard's `datasource` variable picks.
  ds:: { type: 'prometheus', uid: '${datasource}' },

  dashboard(uid, title, description, c):: {
    uid: uid,
    title: title,
    description: description,
    tags: c.dashboardTags,
    annotations: {
      list: [{
        builtIn: 1,
        datasource: { type: 'grafana', uid: '-- Grafana --' },
        enable: true,
        hide: true,
        iconColor: 'rgba(0, 211, 255, 1)',
        name: 'Annotations & Alerts',
        type: 'dashboard',
      }],
    },
    editable: true,
    fiscalYearStartMonth: 0,
    graphTooltip: 1,
    id: null,
    // Each dashboard links to the others by the mixin's own tag.
    links: [{
      asDropdown: false,
      icon: 'external link',
      includeVars: true,
      keepTime: true,
      tags: ['captf-lock-exporter'],
      targetBlank: false,
      title: 'CAPTF lock dashboards',
      tooltip: '',
      type: 'dashboards',
    }],
    refresh: '30s',
    schemaVersion: 42,
    time: { from: 'now-6h', to: 'now' },
    timepicker: {},
    timezone: 'browser',
    version: 1,
    weekStart: '',
  },

  panel(type, id, title, gridPos, description, targets):: defaults[type] {
    type: type,
    id: id,
    title: title,
    description: description,
    datasource: $.ds,
    gridPos: gridPos,
    targets: targets,
  },

  row(id, title, gridPos, collapsed=false):: {
    type: 'row',
    id: id,
    title: title,
    gridPos: gridPos,
    collapsed: collapsed,
    panels: [],
  },

  // An instant query unless instant=false; a legend or a format (table), not both.
  target(expr, refId, legend=null, format=null, instant=true):: {
    datasource: $.ds,
    editorMode: 'code',
    expr: expr,
    refId: refId,
    instant: instant,
    range: !instant,
    [if legend != null then 'legendFormat']: legend,
    [if format != null then 'format']: format,
  },
}
