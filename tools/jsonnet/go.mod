// go-jsonnet for mixin/generate.sh (tools/jsonnet/build.sh). Kept apart from
// the other tool modules so that its dependency versions never mix with theirs.
module captf-lock-exporter/tools/jsonnet

go 1.26.0

require (
	github.com/fatih/color v1.18.0 // indirect
	github.com/google/go-jsonnet v0.22.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	golang.org/x/crypto v0.45.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)

tool (
	github.com/google/go-jsonnet/cmd/jsonnet
	github.com/google/go-jsonnet/cmd/jsonnetfmt
)
