# jitwatch image: the sidecar (`jitwatch serve`) and the demo worker (`python -m jitwatch.demo.worker`)
# for docker-compose.yml. CPU-only torch + Triton: on a machine without a GPU the demo worker
# compiles with jitwatch's compile-only driver (real Triton compiles for sm_90, nothing launched).
#
#   docker build -t jitwatch:0.1.0 .
#
# For a GPU worker, build from a CUDA base image with a CUDA torch instead (TORCH_INDEX below).
FROM python:3.11.11-slim-bookworm

ARG TORCH=torch==2.13.0
ARG TRITON=triton==3.9.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Heavy, rarely changing layers first.
RUN pip install --index-url "${TORCH_INDEX}" "${TORCH}" \
 && pip install "${TRITON}" numpy

COPY pyproject.toml README.md ./
COPY jitwatch ./jitwatch
RUN pip install ".[demo]"

# Unprivileged user; the journal and the Triton cache live on named volumes.
RUN useradd --create-home --uid 10001 jitwatch \
 && mkdir -p /journal /triton-cache \
 && chown jitwatch:jitwatch /journal /triton-cache
USER jitwatch

ENV JITWATCH_DIR=/journal \
    TRITON_CACHE_DIR=/triton-cache

EXPOSE 9400

# Default: the sidecar. Inside a container it must listen on every interface for Prometheus to
# reach it; docker-compose.yml publishes the port on 127.0.0.1 only.
CMD ["jitwatch", "serve", "--host", "0.0.0.0", "--port", "9400", "--journal-dir", "/journal"]
