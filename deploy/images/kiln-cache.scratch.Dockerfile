# kiln/kiln-cache, as scripts/images builds it offline: FROM scratch plus a context that
# scripts/lib/images.sh assembles (rootfs/: the release kiln-cache, the glibc and libgcc files it
# links, /etc/passwd and group, nsswitch.conf, Debian's CA certificates, /tmp). No shell, no
# package manager. For a machine with a registry, kiln-cache.Dockerfile builds the same from
# Debian images.
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
LABEL org.kiln.image=kiln-cache
# nonroot, as deploy/kubernetes/base/kiln-cache.yaml runs it (runAsUser 65532).
USER 65532:65532
EXPOSE 7171 9465
ENTRYPOINT ["kiln-cache"]
