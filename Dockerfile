# The pipeline's images, from this one Dockerfile: EXTRAS="" for every TensorFlow step (ingest,
# TFJob replicas, select), EXTRAS=torch for the PyTorchJob replicas (tag suffix -torch).
# Build: scripts/build-image.sh [--gpu]   (PYTHON_BASE_IMAGE default = versions.env)
ARG PYTHON_BASE_IMAGE=python:3.11.14-slim
FROM ${PYTHON_BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=2

RUN groupadd --gid 1000 app && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin app

WORKDIR /opt/app
# Dependencies first, read from pyproject.toml alone (pinned there), so that a change to src/
# rebuilds only the small layer at the end (layer caching: docker build,
# buildah --layers). Two layers: the [project] dependencies, the same for every build of
# this file, then the EXTRAS' optional-dependencies on top. The -torch build thus shares the
# TensorFlow layer with the plain one (built once, stored once by a registry or containerd)
# and commits only torch's layer, not one of 8 GB (a builder needs about three times a
# layer's size on disk while it commits it).
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb")) \
["project"]["dependencies"]))' > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt && rm -rf /root/.cache /tmp/requirements.txt

# pyproject's extras, comma-separated: gpu = tensorflow[and-cuda], torch = the PyTorch trainer;
# empty = CPU TensorFlow only (then this layer is empty). Declared here, after the shared
# layer, so that its value is no part of that layer's cache key.
ARG EXTRAS=""
RUN python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(d for e in sys.argv[1].split(",") if e \
for d in p["optional-dependencies"][e]))' "${EXTRAS}" > /tmp/extras.txt \
    && if [ -s /tmp/extras.txt ]; then pip install -r /tmp/extras.txt; fi \
    && rm -rf /root/.cache /tmp/extras.txt
COPY src ./src
# pyproject's `readme` names README.md, which only fills the package's long description: an
# empty one stands in, so that the repository's README is no part of the build context (an
# edit to it would be a new image and content tag: scripts/lib.sh image_context)
RUN touch README.md && pip install --no-deps . && rm -rf /root/.cache build README.md

USER 1000:1000
ENV HOME=/home/app
ENTRYPOINT []
CMD ["python", "-m", "training.train", "--help"]
