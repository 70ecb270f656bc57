# kiln/train-example, as scripts/images builds it offline: the example Job of deploy/kubernetes/job
# (its train.py) on the kilnd image's layers, which already hold Debian 12's Python 3.11 (and
# Triton and the CUDA wheels, shared on disk with kilnd's image), plus the kiln Python package and
# what it requires (grpcio, protobuf, blake3), installed by that Python from the wheels
# scripts/lib/images.sh stages in the context (wheels/, train.py). No torch: the job launches its
# kernels through the CUDA driver API, which the NVIDIA container runtime mounts.
ARG KILND_IMAGE=kiln/kilnd:0.1.0

# The package goes to a directory of its own, so the image adds that directory and not a copy of
# the venv; pip runs from Debian's wheel file and stays out of the image.
FROM ${KILND_IMAGE} AS install
COPY wheels/ /tmp/wheels/
RUN ["/opt/kiln/venv/bin/python", "/tmp/wheels/pip.whl/pip", "install", "--quiet", "--no-index", \
     "--no-cache-dir", "--disable-pip-version-check", "--find-links", "/tmp/wheels", \
     "--target", "/opt/kiln/example/site", "kiln"]

FROM ${KILND_IMAGE}
COPY --from=install /opt/kiln/example/site /opt/kiln/example/site
COPY train.py /opt/kiln/example/train.py
# KILN_DAEMON: the socket the kilnd DaemonSet puts in the node's /run/kiln, which the Job mounts.
ENV PYTHONPATH=/opt/kiln/example/site \
    HOME=/tmp \
    KILN_DAEMON=unix:///run/kiln/kilnd.sock
LABEL org.kiln.image=train-example
# The Job's securityContext runs it as 1000 (group 2000 added, to reach kilnd's 0660 socket).
USER 1000:1000
WORKDIR /opt/kiln/example
ENTRYPOINT ["/opt/kiln/venv/bin/python", "/opt/kiln/example/train.py"]
