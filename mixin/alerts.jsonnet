// The mixin's alerts as a Prometheus rule file (YAML), for mixin/generate.sh.
std.manifestYamlDoc((import 'mixin.libsonnet').prometheusAlerts, indent_array_in_object=true, quote_keys=false)
