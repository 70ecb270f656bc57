# kiln/kilnd, as scripts/images builds it offline: FROM scratch plus a context that
# scripts/lib/images.sh assembles from three parts, one layer each, so a new kilnd binary rebuilds
# only the last:
#   debian/  Debian 12's Python 3.11 and the libraries it and kilnd link, ldconfig, the base files
#   wheels/  the pinned wheels of scripts/lib/setup.sh (PY_PACKAGES) and Debian's pip wheel
#   kiln/    kilnd and kiln from cargo build
# No shell. For a machine with a registry, kilnd.Dockerfile builds the same from Debian images.

# The venv is made by the image's own Python, so its paths and compiled files are the image's.
FROM scratch AS python
COPY debian/ /
RUN ["/sbin/ldconfig"]
RUN ["/usr/bin/python3.11", "-m", "compileall", "-q", "-j", "0", "/usr/lib/python3.11"]
RUN ["/usr/bin/python3.11", "-m", "venv", "--without-pip", "/opt/kiln/venv"]
COPY wheels/ /tmp/wheels/
RUN ["/opt/kiln/venv/bin/python", "/tmp/wheels/pip.whl/pip", "install", "--quiet", "--no-index", \
     "--no-cache-dir", "--disable-pip-version-check", "--find-links", "/tmp/wheels", \
     "--requirement", "/tmp/wheels/requirements.txt"]

# Everything but /tmp, which held the wheels.
FROM scratch
COPY --from=python /etc /etc
COPY --from=python /lib /lib
COPY --from=python /lib64 /lib64
COPY --from=python /usr /usr
COPY --from=python /sbin /sbin
COPY --from=python /opt /opt
COPY --from=python /run /run
COPY --from=python /var /var
COPY kiln/ /
# Docker's COPY makes /tmp 0755 whatever the context says; Triton workers (nobody) write there.
RUN ["/usr/bin/python3.11", "-c", "import os; os.makedirs('/tmp', exist_ok=True); os.chmod('/tmp', 0o1777)"]
# kilnd reads these when no config names them (kilnd.toml in deploy/kubernetes names the same).
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    KILN_PYTHON=/opt/kiln/venv/bin/python \
    KILN_CUDA_ROOT=/opt/kiln/cuda
LABEL org.kiln.image=kilnd
# Root, as the DaemonSet runs it: kilnd starts its Triton workers as nobody.
USER 0:0
EXPOSE 9464
ENTRYPOINT ["kilnd"]
