# kiln/redis, as scripts/images builds it offline: FROM scratch plus Debian 12's redis-server and
# redis-tools packages and the libraries their binary links, unpacked by scripts/lib/images.sh
# (rootfs/), with /etc/passwd and group. Debian's /etc/redis/redis.conf is in the image but not
# used by default: it daemonizes and binds loopback. Docker Hub's redis:7 runs the same way (uid
# 999, /data), so either serves deploy/kubernetes/overlays/small.
FROM scratch
COPY rootfs/ /
# COPY makes files root's unless told: the data directory is redis's.
COPY --chown=999:999 data/ /data/
ENV PATH=/usr/bin:/bin
LABEL org.kiln.image=redis
USER 999:999
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
