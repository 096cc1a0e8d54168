# syntax=docker/dockerfile:1
# captf-lock-exporter: a Rust build stage, then the binary alone on
# distroless (glibc, CA certificates, no shell), as uid/gid 65532.
# Build: docker build -t captf-lock-exporter:dev .
# Not built in this repository's CI (no container engine there): see
# docs/decisions/chart.md.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# .dockerignore lets in only what `cargo build` reads.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin captf-lock-exporter \
 && install -D -m 0755 target/release/captf-lock-exporter /out/captf-lock-exporter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/captf-lock-exporter /usr/local/bin/captf-lock-exporter
USER 65532:65532
EXPOSE 9820
ENTRYPOINT ["/usr/local/bin/captf-lock-exporter"]
