# syntax=docker/dockerfile:1
#
# The image the manifests run, ghcr.io/slate-sync/slate:VERSION (manifests/kubernetes/), VERSION
# being Cargo.toml's version (tests/manifests.rs checks the manifests' tag against it):
#
#   VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
#   docker build --build-arg VERSION="$VERSION" -t ghcr.io/slate-sync/slate:"$VERSION" .
#
# It runs `slate sync --config /etc/slate/slate.toml` as UID/GID 10001 (the Deployments'
# runAsUser/runAsGroup/fsGroup), the binary at /usr/local/bin/slate (their `command`), the
# state in the volume /var/lib/slate. Mount the config at /etc/slate (a ConfigMap there);
# credentials come from the environment (manifests/README.md).

# Builder: the official Rust image at the project's toolchain, 1.95, on Debian bookworm.
# `rust:1.95-bookworm` pins the minor version (1.95.x patches follow) and the Debian release;
# `rust:1-bookworm` would move to each new Rust release unasked. Bookworm on both stages: the
# binary links the runtime image's glibc.
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# Only what the build reads (.dockerignore keeps the rest out of the context): the manifest and
# lock file, the sources, the SQL migrations and OpenAPI schema they include, the example config
# they include, and examples/ (Cargo.toml declares the `lab` example; it is not built).
COPY Cargo.toml Cargo.lock config.example.toml ./
COPY src ./src
COPY schema ./schema
COPY examples ./examples
# The release binary, as scripts/package-deb.sh builds it: the default features only (never the
# test hooks `faults` or `lab`), the dependencies exactly as Cargo.lock has them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin slate \
    && install -D -m 0755 target/release/slate /out/slate

FROM debian:bookworm-slim
ARG VERSION
LABEL org.opencontainers.image.title="slate" \
      org.opencontainers.image.description="Keeps object stores consistent by replicating only what changed" \
      org.opencontainers.image.source="https://github.com/slate-sync/slate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# ca-certificates: the roots slate's TLS clients (rustls with the system's store) trust. Not
# pinned to a version: bookworm's archive keeps only the current one (with its security fixes).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# A non-root user with the Deployments' IDs; /var/lib/slate its own (the SQLite database).
RUN groupadd --system --gid 10001 slate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/slate --no-create-home \
       --shell /usr/sbin/nologin slate \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/slate \
    && install -d -m 0755 /etc/slate
COPY --from=builder /out/slate /usr/local/bin/slate
COPY config.example.toml /usr/share/doc/slate/config.example.toml
USER 10001:10001
WORKDIR /var/lib/slate
VOLUME ["/var/lib/slate"]
# the listener: webhooks, /healthz, /readyz, /metrics (set [daemon] listen = "0.0.0.0:3030" and
# SLATE_API_TOKEN to reach it from outside the container)
EXPOSE 3030
ENTRYPOINT ["slate"]
CMD ["sync", "--config", "/etc/slate/slate.toml"]
