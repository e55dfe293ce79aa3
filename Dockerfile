# settle's container image: built from this repository, run as a non-root user on a small
# runtime base (glibc and CA certificates only, for calls to providers' APIs over TLS).
#
#   docker build -t settle .
#   docker run --rm -e DATABASE_URL=postgres://... -v ./settle.toml:/etc/settle/settle.toml:ro \
#       -e SETTLE_CONFIG=/etc/settle/settle.toml -p 8080:8080 settle serve

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin settle \
    && cp target/release/settle /usr/local/bin/settle

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/settle /usr/local/bin/settle
WORKDIR /home/nonroot
# Listen on every interface inside the container. 8080 is the public listener (webhooks,
# /healthz); 9090 the internal one (API, dashboard, /metrics, /readyz): publish it only on a
# private network.
ENV SETTLE_LISTEN=0.0.0.0:8080
ENV SETTLE_OPS_LISTEN=0.0.0.0:9090
EXPOSE 8080 9090
# GET /healthz on the listen port, without curl or a shell. A worker serves no HTTP: its
# container disables this check (deploy/compose.yaml).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/settle", "healthcheck"]
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/settle"]
CMD ["serve"]
