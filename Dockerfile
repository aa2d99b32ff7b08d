# xdsd in a container: a multi-stage build, a small runtime image, a non-root user, the resources
# directory as a volume.
#
#   docker build -t xdsd .
#   docker run --rm -p 18000:18000 -p 18001:18001 -v "$PWD/examples/basic/resources:/resources:ro" xdsd
#
# The same binary, flags and ports as the README: gRPC (ADS, per-type services, CSDS, gRPC health,
# REST polling) on 18000; the admin API (/healthz, /readyz, /clients, /config, /metrics) on 18001.

FROM rust:1-slim-bookworm AS build
# protoc: the etcd client's build generates its gRPC code.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p xdsd

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home xdsd
COPY --from=build /src/target/release/xdsd /usr/local/bin/xdsd
USER 10001
VOLUME ["/resources"]
EXPOSE 18000 18001
ENV XDSD_LISTEN=0.0.0.0:18000 \
    XDSD_ADMIN_LISTEN=0.0.0.0:18001
ENTRYPOINT ["/usr/local/bin/xdsd"]
# The directory in the command, not the environment: arguments of one's own (the etcd source's,
# say) replace it instead of conflicting with it.
CMD ["serve", "--resources", "/resources"]
