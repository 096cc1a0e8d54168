// The pod sandbox's pause process for the node stage's containerd (tools/node/build.sh).
module captf-lock-exporter/tools/node/pause

go 1.26.0
