# The pipeline's images, from this one Dockerfile: EXTRAS="" for every TensorFlow step (ingest,
# TFJob replicas, select), EXTRAS=torch for the PyTorchJob replicas (tag suffix -torch).
# Build: scripts/build-image.sh [--gpu]   (PYTHON_BASE_IMAGE default = versions.env)
ARG PYTHON_BASE_IMAGE=python:3.11.14-slim
FROM ${PYTHON_BASE_IMAGE}

# pyproject's extras, comma-separated: gpu = tensorflow[and-cuda], torch = the PyTorch trainer;
# empty = CPU TensorFlow only.
ARG EXTRAS=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=2

RUN groupadd --gid 1000 app && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin app

WORKDIR /opt/app
# Dependencies first (pinned in pyproject.toml), for layer caching.
COPY pyproject.toml README.md ./
COPY src ./src
RUN if [ -n "${EXTRAS}" ]; then pip install ".[${EXTRAS}]"; else pip install .; fi \
    && rm -rf /root/.cache

USER 1000:1000
ENV HOME=/home/app
ENTRYPOINT []
CMD ["python", "-m", "training.train", "--help"]
