// The node stage's impostor (tests/node): a TLS server with a certificate no trusted CA signed.
module captf-lock-exporter/tools/node/impostor

go 1.26.0
