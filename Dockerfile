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
# Dependencies first, read from pyproject.toml alone (its [project] dependencies and the
# EXTRAS' optional-dependencies, pinned there), so that a change to src/ or README.md
# rebuilds only the small layer below (layer caching: docker build, buildah --layers).
COPY pyproject.toml ./
RUN python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + [d for e in sys.argv[1].split(",") if e \
for d in p["optional-dependencies"][e]]))' "${EXTRAS}" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt && rm -rf /root/.cache /tmp/requirements.txt
COPY README.md ./
COPY src ./src
RUN pip install --no-deps . && rm -rf /root/.cache build

USER 1000:1000
ENV HOME=/home/app
ENTRYPOINT []
CMD ["python", "-m", "training.train", "--help"]
