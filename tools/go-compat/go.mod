module captf-lock-exporter/tools/go-compat

go 1.19
