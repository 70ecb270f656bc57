# kiln/redis for a machine with a registry: Debian 12's redis-server on Debian's image. From the
# repository root:
#   docker build -f deploy/images/redis.Dockerfile -t kiln/redis:7.0 .
# Docker Hub's redis:7 serves as well (uid 999, /data, as here); this one is what
# redis.scratch.Dockerfile, which scripts/images builds offline, holds.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && usermod -u 999 redis && groupmod -g 999 redis \
 && mkdir -p /data && chown 999:999 /data
USER 999:999
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
