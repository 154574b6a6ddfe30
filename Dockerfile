# tpu-trainer training image: one matched torch / torch_xla pair per image.
# Build it with `invoke build [--version 2.8]` (Docker SDK, legacy builder); the pair's
# versions come from env/versions.yaml and its exact pins from env/constraints-<pair>.txt.
# Run it: `docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/runs:/work/runs"
#   tpu-trainer:2.9 train --devices 8 --precision bf16` (on a TPU VM add --privileged --net=host
#   and `--env-profile tpu-vm`).

# The official image by default; `invoke base-image` makes an offline equivalent.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------- deps
# The pinned Python environment: slow (minutes, gigabytes), so it only rebuilds when the
# pair, the lock file or pyproject.toml change. This is the only stage that sees the
# optional build CA bundle; the runtime stage copies the staged /opt/venv out of it and
# nothing else (the legacy builder the Docker SDK drives has no secret mounts).
FROM ${BASE_IMAGE} AS deps
SHELL ["/bin/bash", "-o", "pipefail", "-eu", "-c"]
ARG PAIR=2.9
ARG TORCH_VERSION=2.9.0
ARG TORCH_XLA_VERSION=2.9.0
ARG LIBTPU_VERSION=0.0.21
ARG PIP_INDEX_URL=https://pypi.org/simple
# Fixed file times and hash-based .pyc files (py_compile reads it): same inputs, same layers.
ARG SOURCE_DATE_EPOCH=315532800
# The CA glob matches nothing unless the build was given a CA bundle (`--ca-bundle`).
COPY pyproject.toml env/constraints-${PAIR}.txt .build/extra-ca.cr[t] /tmp/build/
RUN if [ -s /tmp/build/extra-ca.crt ]; then export PIP_CERT=/tmp/build/extra-ca.crt; fi \
 && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/tmp/build/pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/build/requirements.txt \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
      --index-url "${PIP_INDEX_URL}" --constraint "/tmp/build/constraints-${PAIR}.txt" \
      --requirement /tmp/build/requirements.txt \
      "torch==${TORCH_VERSION}" "torch-xla==${TORCH_XLA_VERSION}" "libtpu==${LIBTPU_VERSION}" \
 && mkdir -p /staging/opt && mv /opt/venv /staging/opt/venv \
 && find /staging -exec touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" {} +

# ---------------------------------------------------------------------------- source
# Our code, staged with fixed file times. The runtime stage copies each staging tree
# into `/`: COPY stamps the build's clock on the directory it copies into, but not on
# the tree's own entries, so only copies into `/` give the same layer on every rebuild.
FROM ${BASE_IMAGE} AS source
SHELL ["/bin/bash", "-o", "pipefail", "-eu", "-c"]
ARG SOURCE_DATE_EPOCH=315532800
COPY env/ /staging/opt/tpu-trainer/env/
COPY trainer/ /staging/opt/tpu-trainer/trainer/
RUN find /staging -exec touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" {} +

# ---------------------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-eu", "-c"]
ARG SOURCE_DATE_EPOCH=315532800
# A fixed non-root account written directly: useradd stamps today's date into
# /etc/shadow, which would change this layer on every rebuild. /work and the home are
# world-writable so `--user $(id -u):$(id -g)` (any uid) can write its run dirs and caches;
# USER/LOGNAME below answer getpass.getuser() (torch's cache dirs) for uids not in /etc/passwd.
RUN echo "trainer:x:1000:1000:tpu-trainer:/home/trainer:/usr/sbin/nologin" >> /etc/passwd \
 && echo "trainer:x:1000:" >> /etc/group \
 && mkdir -p /home/trainer /work/runs \
 && chmod 1777 /home/trainer /work /work/runs \
 && printf '#!/bin/sh\nexec python -m trainer "$@"\n' > /usr/local/bin/tpu-trainer \
 && chmod 755 /usr/local/bin/tpu-trainer \
 && touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" /etc /etc/passwd /etc/group /home \
      /home/trainer /work /work/runs /usr/local/bin /usr/local/bin/tpu-trainer
COPY --from=deps /staging/ /
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONPATH=/opt/tpu-trainer \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TPU_TRAINER_ENV_DIR=/opt/tpu-trainer/env \
    HOME=/home/trainer \
    USER=trainer \
    LOGNAME=trainer
# Our code last: a change in trainer/ rebuilds only this small layer.
COPY --from=source /staging/ /
# Fail the build on a broken or mismatched pair (torch_xla does not pin torch; a wrong
# torch only shows as an undefined-symbol ImportError), on versions other than the ones
# asked for, or on an engine that cannot start. The imports write temporary files
# (torch.distributed generates a module into a fresh temp dir): they go to a scratch
# TMPDIR that is removed, and /tmp's time is reset, so this step adds nothing to the image.
ARG TORCH_VERSION=2.9.0
ARG TORCH_XLA_VERSION=2.9.0
RUN export TMPDIR=/tmp/preflight && mkdir "$TMPDIR" \
 && python -m trainer preflight --import \
 && python -c 'import os, torch, torch_xla; \
got = (torch.__version__.split("+")[0], torch_xla.__version__.split("+")[0]); \
want = (os.environ["TORCH_VERSION"], os.environ["TORCH_XLA_VERSION"]); \
assert got == want, f"torch/torch_xla in the image are {got}, expected {want}"' \
 && rm -rf "$TMPDIR" && touch --date="@${SOURCE_DATE_EPOCH}" /tmp
WORKDIR /work
ARG IMAGE_TAG=tpu-trainer:dev
ENV TPU_TRAINER_IMAGE=${IMAGE_TAG}
USER 1000:1000
ENTRYPOINT ["python", "-m", "trainer"]
CMD ["--help"]
