# kiln/kiln-cache for a machine with a registry: a multi-stage build on Docker Hub's Rust and
# Debian images. From the repository root:
#   docker build -f deploy/images/kiln-cache.Dockerfile -t kiln/kiln-cache:0.1.0 .
# The same contents as kiln-cache.scratch.Dockerfile, which scripts/images builds offline, on a
# Debian base (so with a shell and apt), about 90 MB instead of 13.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kiln-cache-server --bin kiln-cache

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd -g 65532 nonroot && useradd -u 65532 -g 65532 -d /nonexistent -s /usr/sbin/nologin nonroot
COPY --from=build /src/target/release/kiln-cache /usr/local/bin/kiln-cache
USER 65532:65532
EXPOSE 7171 9465
ENTRYPOINT ["kiln-cache"]
