// The mixin's dashboards, one file each, for mixin/generate.sh (jsonnet -m).
local m = import 'mixin.libsonnet';
{ [name]: m.grafanaDashboards[name] for name in std.objectFields(m.grafanaDashboards) }
