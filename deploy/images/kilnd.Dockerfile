# kiln/kilnd for a machine with a registry: a multi-stage build on Docker Hub's Rust and Debian
# images. From the repository root:
#   docker build -f deploy/images/kilnd.Dockerfile -t kiln/kilnd:0.1.0 .
# The same contents as kilnd.scratch.Dockerfile, which scripts/images builds offline: kilnd and
# kiln, Debian 12's Python 3.11 with the pinned toolchain of scripts/lib/setup.sh (PY_PACKAGES,
# read from that file, so the pins live in one place) at /opt/kiln/venv, and /opt/kiln/cuda, the
# wheels' CUDA tree. No CUDA base image is needed: NVRTC, ptxas and the headers come from the
# wheels, and the NVIDIA container runtime mounts the driver for GPU validation.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kiln-daemon -p kiln-client --bin kilnd --bin kiln

FROM debian:bookworm-slim
COPY scripts/lib/setup.sh /tmp/kiln/scripts/lib/setup.sh
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/kiln/venv \
 && bash -c 'source /tmp/kiln/scripts/lib/setup.sh && /opt/kiln/venv/bin/pip install --no-cache-dir "${PY_PACKAGES[@]}"' \
 && ln -s venv/lib/python3.11/site-packages/nvidia/cu13 /opt/kiln/cuda \
 && mkdir -p /run/kiln /var/cache/kiln \
 && groupadd -g 2000 kiln \
 && rm -rf /tmp/kiln
COPY --from=build /src/target/release/kilnd /src/target/release/kiln /usr/local/bin/
ENV KILN_PYTHON=/opt/kiln/venv/bin/python \
    KILN_CUDA_ROOT=/opt/kiln/cuda
# Root, as the DaemonSet runs it: kilnd starts its Triton workers as nobody.
USER 0:0
EXPOSE 9464
ENTRYPOINT ["kilnd"]
