// The strict dashboard decoder of tools/dashboards/check.sh: grafana-foundation-sdk's Go types.
module captf-lock-exporter/tools/dashboards/strict

go 1.26.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
