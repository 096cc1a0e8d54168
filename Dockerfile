# syntax=docker/dockerfile:1
# captf-lock-exporter: a Rust build stage, then the binary alone on
# distroless (glibc, CA certificates, no shell), as uid/gid 65532.
# Build: docker build -t captf-lock-exporter:dev \
#          --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
# Without an engine or a registry, scripts/image.sh builds the same image
# (same path, user, entrypoint, port, labels) from Debian's packages; its
# check (tools/image/check_image.py) compares the two where it can, and
# docs/decisions/image.md says what it cannot.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The crate list embedded in the binary (`cargo audit bin` reads it), as
# scripts/image.sh builds it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo install --locked cargo-auditable
# .dockerignore lets in only what `cargo build` reads.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo auditable build --release --locked --bin captf-lock-exporter \
 && install -D -m 0755 target/release/captf-lock-exporter /out/captf-lock-exporter

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/captf-io/captf-lock-exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="captf-lock-exporter"
COPY --from=build /out/captf-lock-exporter /usr/local/bin/captf-lock-exporter
USER 65532:65532
EXPOSE 9820
ENTRYPOINT ["/usr/local/bin/captf-lock-exporter"]
