#!/usr/bin/env bash
# Shared helpers: repo root, versions.env, usage, and the pipeline helpers used by
# submit-pipeline.sh, train.sh and build-image.sh. Sourced by every script in scripts/ except
# e2e-cluster.sh, which has its own log/die and gets its tools from scripts/tools.sh.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../versions.env
source "${REPO_ROOT}/versions.env"
KUBECTL_GIVEN="${KUBECTL:-}"  # a KUBECTL the user set: kept or refused (kubectl_for_cluster), never replaced
KUBECTL="${KUBECTL:-kubectl}"
if [[ -z "${KUBECTL_GIVEN}" ]] && ! command -v kubectl >/dev/null 2>&1 \
  && [[ -x "${REPO_ROOT}/.venv/bin/kubectl" ]]; then
  KUBECTL="${REPO_ROOT}/.venv/bin/kubectl"
fi
# Python for serialising manifests (json: stdlib) and reading rendered YAML (PyYAML, in .venv).
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${REPO_ROOT}/.venv/bin/python" ]]; then PYTHON="${REPO_ROOT}/.venv/bin/python"; else PYTHON=python3; fi
fi
CLUSTER_NAME="${CLUSTER_NAME:-fashion-mnist}"
NAMESPACE="${NAMESPACE:-fashion-mnist}"
PIPELINE="fashion-mnist-pipeline"   # the WorkflowTemplate (base/ml/pipeline/workflowtemplate.yaml)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required (see docs/gitops.md)"; }
wants_help() { [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; }
# seconds NAME VALUE [fraction]: VALUE if it is a number of seconds (whole, unless "fraction"
# is given), else a one-line error.
seconds() {
  local re='^[0-9]{1,12}$'
  [[ "${3:-}" == fraction ]] && re='^[0-9]{1,12}([.][0-9]+)?$'
  [[ "$2" =~ $re ]] || die "$1 must be a number of seconds (at most 12 digits), got '$2'"
  # decimal even with leading zeros (bash reads 010 as octal, 08 not at all)
  if [[ "$2" == *.* ]]; then echo "$2"; else echo "$((10#$2))"; fi
}
# kubectl_minors KUBECTL: "CLIENT SERVER", the minor versions of Kubernetes 1.x that
# `KUBECTL version -o json` reports ("-" for one it does not: no API server answering in 10 s,
# no kubectl output). On a terminal its stderr is the user's (a credential plugin's login prompt
# must show); elsewhere it is dropped (the script's own next call says what is wrong) and the
# call bounded to 60 s where coreutils' timeout is there (a plugin waiting for a login).
kubectl_minors() {
  local err=/dev/null bound=()
  if [[ -t 2 ]]; then err=/dev/stderr; elif command -v timeout >/dev/null 2>&1; then bound=(timeout 60); fi
  { ${bound[@]+"${bound[@]}"} "$1" version -o json --request-timeout=10s 2>"${err}" || true; } \
    | "${PYTHON}" -c '
import json, re, sys
try:
    v = json.load(sys.stdin)
except ValueError:
    v = None
if not isinstance(v, dict):
    v = {}
def minor(key):  # "34", or "34+" as some providers report it; only Kubernetes 1.x
    info = v.get(key)
    if not isinstance(info, dict) or str(info.get("major", "")).rstrip("+") != "1":
        return "-"
    m = re.match(r"[0-9]{1,4}", str(info.get("minor", "")))
    return m.group(0) if m else "-"
print(minor("clientVersion"), minor("serverVersion"))'
}
# kubectl_for_cluster: KUBECTL becomes a kubectl within kubectl's supported version skew of the
# cluster's API server, one minor version either way
# (https://kubernetes.io/releases/version-skew-policy/#kubectl). A KUBECTL the user set is kept
# or refused (one that is no command too); otherwise PATH's kubectl, then the venv's (1.37,
# what `make validate` renders with), the first within it. Refuses with one line naming each
# kubectl's version and the server's; says nothing when no kubectl gets an answer from the
# server (the script's next call says why).
kubectl_for_cluster() {
  local candidates=() c client server="" answered="" seen=()
  if [[ -n "${KUBECTL_GIVEN}" ]]; then
    command -v "${KUBECTL_GIVEN}" >/dev/null 2>&1 \
      || die "KUBECTL=${KUBECTL_GIVEN} is not a command (unset it to use PATH's or the venv's kubectl)"
    candidates=("${KUBECTL_GIVEN}")
  else
    if command -v kubectl >/dev/null 2>&1; then candidates+=("$(command -v kubectl)"); fi
    if [[ -x "${REPO_ROOT}/.venv/bin/kubectl" ]]; then candidates+=("${REPO_ROOT}/.venv/bin/kubectl"); fi
  fi
  for c in "${candidates[@]}"; do
    read -r client server < <(kubectl_minors "${c}")
    if [[ "${client}" == - || "${server}" == - ]]; then
      seen+=("${c}: no version from it and the server")
      continue
    fi
    answered="${server}"
    if ((10#${client} - 10#${server} <= 1 && 10#${server} - 10#${client} <= 1)); then
      if ((${#seen[@]})); then log "using ${c} (1.${client}; the server is 1.${server}): ${seen[*]}"; fi
      KUBECTL="${c}"
      return 0
    fi
    seen+=("${c} is 1.${client}")
  done
  [[ -n "${answered}" ]] || return 0
  server="${answered}"
  die "no kubectl within one minor version of the cluster's API server (1.${server}), kubectl's supported skew: $(IFS=';'; echo "${seen[*]}" | sed 's/;/; /g'); install kubectl 1.$((10#${server} - 1)) to 1.$((10#${server} + 1)) or set KUBECTL to one"
}
# environment NAME: NAME if it is one of overlays/<env> (a plain name), else a one-line error.
environment() {
  [[ "$1" =~ ^[a-z0-9][a-z0-9-]*$ && -f "${REPO_ROOT}/overlays/$1/kustomization.yaml" ]] \
    || die "no environment '$1' (have: $(cd "${REPO_ROOT}/overlays" && echo */ | tr -d /))"
  echo "$1"
}

# pinned_version KEY: the version of a remote base, read from the one place it is stated, the URL
# in its kustomization (kustomize cannot read versions.env): KSERVE_VERSION (base/platform/kserve;
# kserve-runtimes names the same release, `make validate` check remote-refs),
# ARGO_WORKFLOWS_VERSION, TRAINING_OPERATOR_VERSION (`?ref=`), ARGOCD_VERSION (argocd/install),
# CERT_MANAGER_VERSION (base/platform/cert-manager).
pinned_version() {
  local dir v
  case "$1" in
    KSERVE_VERSION) dir=base/platform/kserve ;;
    ARGO_WORKFLOWS_VERSION) dir=base/platform/argo-workflows ;;
    TRAINING_OPERATOR_VERSION) dir=base/platform/training-operator ;;
    ARGOCD_VERSION) dir=argocd/install ;;
    CERT_MANAGER_VERSION) dir=base/platform/cert-manager ;;
    *) die "no remote base pins $1" ;;
  esac
  v="$(sed -nE 's#^[[:space:]]*-[[:space:]]+(https://|github\.com/)[^[:space:]]*(/|[?]ref=)(v[0-9]+[.][0-9]+[.][0-9]+)(/[^[:space:]]*)?$#\3#p' \
    "${REPO_ROOT}/${dir}/kustomization.yaml" | sort -u)"
  [[ "${v}" =~ ^v[0-9.]+$ ]] || die "${dir}/kustomization.yaml: no single version in its remote base URL (got '${v//$'\n'/ }')"
  echo "${v}"
}

# image_context: what the pipeline image is built from, as one stream: the Dockerfile and
# pyproject.toml whole, then a sha256sum line for each file under src/ (sorted,
# bytecode and egg-info left out): the files .dockerignore lets into `docker build`'s context,
# committed or not. scripts/e2e-images.sh keys its ml build on it too.
IMAGE_FILES=(Dockerfile pyproject.toml)  # beside src/: the build context's files
image_context() {
  (cd "${REPO_ROOT}" && cat "${IMAGE_FILES[@]}" \
    && find src -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum)
}
# content_tag: the pipeline image's tag by content, src-<first 12 hex of sha256>: of its build
# context (image_context) and the base it is built FROM (PYTHON_BASE_IMAGE). A change to
# either is a new tag, so a node's cached image is never taken for new code (IfNotPresent);
# the same tree gives the same tag on every machine. `make validate` refuses another tag with
# IfNotPresent on the pipeline image (validation check image-by-content).
content_tag() {
  local sum
  sum="$({ image_context; echo "FROM ${PYTHON_BASE_IMAGE}"; } | sha256sum)" || die "cannot hash the image's build context"
  echo "src-${sum:0:12}"
}
# commit_file FILE MESSAGE: commit FILE (a path in the repo) alone on the checked-out branch, and
# say what to push. A detached HEAD is refused and FILE restored from git.
commit_file() {
  git -C "${REPO_ROOT}" symbolic-ref -q HEAD >/dev/null \
    || { git -C "${REPO_ROOT}" checkout -q -- "$1"; die "detached HEAD: check out the branch Argo CD follows first"; }
  git -C "${REPO_ROOT}" commit -q -m "$2" -- "$1" || die "git commit of $1 failed (see above)"
  log "committed: $2"
}

# overlay_param OVERLAY NAME: the value of the pipeline parameter NAME as overlays/OVERLAY
# renders it (e.g. `image`: the reference its kustomize images: entry names).
overlay_param() {
  [[ -f "${REPO_ROOT}/overlays/$1/kustomization.yaml" ]] || die "no overlay $1"
  "${KUBECTL}" kustomize "${REPO_ROOT}/overlays/$1" | "${PYTHON}" -c '
import sys
import yaml
name = sys.argv[1]
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc.get("kind") == "WorkflowTemplate":
        for p in doc["spec"]["arguments"]["parameters"]:
            if p["name"] == name:
                print(p["value"])
                sys.exit(0)
sys.exit(f"error: the pipeline has no parameter {name}")
' "$2"
}

# workflow_json ENTRYPOINT [NAME=VALUE ...]: a Workflow running ENTRYPOINT of the pipeline
# WorkflowTemplate with these arguments, serialised by json.dumps (values may hold any
# character: quotes, JSON, newlines). Argo ignores arguments that the template does not
# declare, so a misspelt or repeated name is an error here (names: the template's workflow
# parameters and the entrypoint's inputs, read from base/ml/pipeline/workflowtemplate.yaml).
workflow_json() {
  "${PYTHON}" -c '
import json
import sys
import yaml
ns, template, path, entrypoint, *params = sys.argv[1:]
spec = yaml.safe_load(open(path))["spec"]
templates = {t["name"]: t for t in spec["templates"]}
if entrypoint not in templates:
    sys.exit(f"error: no template {entrypoint!r} in {template} (one of {sorted(templates)})")
inputs = (templates[entrypoint].get("inputs") or {}).get("parameters") or []
declared = {p["name"] for p in spec["arguments"]["parameters"] + inputs}
args = []
for p in params:
    name, sep, value = p.partition("=")
    if not sep or not name:
        sys.exit(f"error: parameter {p!r} is not name=value")
    if name not in declared:
        sys.exit(f"error: {template} has no parameter {name!r} (one of {sorted(declared)})")
    if any(a["name"] == name for a in args):
        sys.exit(f"error: parameter {name!r} given twice")
    args.append({"name": name, "value": value})
wf = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {"generateName": f"{template}-", "namespace": ns},
    "spec": {
        "workflowTemplateRef": {"name": template},
        "entrypoint": entrypoint,
        "arguments": {"parameters": args},
    },
}
print(json.dumps(wf, indent=2))
' "${NAMESPACE}" "${PIPELINE}" "${REPO_ROOT}/base/ml/pipeline/workflowtemplate.yaml" "$@"
}

# wait_workflow WORKFLOW TIMEOUT POLL: poll the Workflow's phase; 0 when Succeeded, 1 (with
# Argo's message) as soon as it is Failed or Error, 1 after TIMEOUT seconds.
# A failed `kubectl get` (an API hiccup) is retried until TIMEOUT, not fatal.
wait_workflow() {
  local wf="$1" deadline=$((SECONDS + $2)) phase
  while true; do
    phase="$("${KUBECTL}" -n "${NAMESPACE}" get "${wf}" -o jsonpath='{.status.phase}')" \
      || { log "${wf}: could not read its phase; retrying"; phase=""; }
    case "${phase}" in
      Succeeded)
        log "${wf}: Succeeded"
        return 0
        ;;
      Failed | Error)
        printf 'error: %s: %s: %s\n' "${wf}" "${phase}" \
          "$("${KUBECTL}" -n "${NAMESPACE}" get "${wf}" -o jsonpath='{.status.message}')" >&2
        return 1
        ;;
    esac
    if ((SECONDS >= deadline)); then
      printf 'error: %s: still %s after %ss\n' "${wf}" "${phase:-Pending}" "$2" >&2
      return 1
    fi
    sleep "$3"
  done
}

# mirror_kustomization SRC DEST: copy the kustomization directory SRC to DEST; with
# UPSTREAM_MIRROR_DIR set (offline), each pinned remote resource of it is replaced by its
# mirror file (the URL -> file mapping of src/validation/render.py: REMOTES).
mirror_kustomization() {
  mkdir -p "$2"
  cp -r "$1/." "$2/"
  [[ -n "${UPSTREAM_MIRROR_DIR:-}" ]] || return 0
  PYTHONPATH="${REPO_ROOT}/src${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" - "$2" \
    "${UPSTREAM_MIRROR_DIR}" <<'PY'
import shutil
import sys
from pathlib import Path

import yaml
from validation.render import pinned

kdir, mirror = Path(sys.argv[1]), Path(sys.argv[2])
kfile = kdir / "kustomization.yaml"
k = yaml.safe_load(kfile.read_text())
resources = []
for r in k.get("resources") or []:
    if pin := pinned(r):
        if not (mirror / pin[2]).is_file():
            sys.exit(f"error: no mirror file {mirror / pin[2]} (stands for {r})")
        shutil.copyfile(mirror / pin[2], kdir / pin[2])
        r = pin[2]
    elif "://" in r or r.startswith("github.com/"):
        sys.exit(f"error: no mirror file for remote resource {r}")
    resources.append(r)
k["resources"] = resources
kfile.write_text(yaml.safe_dump(k))
PY
}

# through_layer TREE PART FILE WORK: FILE (rendered YAML) replaced by its render through the
# kustomize layer TREE/PART (PART "." for a one-layer TREE), whose kustomization.yaml names
# `rendered.yaml`: the whole tree is copied to WORK, links followed (a layer may share files
# with ../), FILE beside that kustomization as rendered.yaml. Used by install-platform.sh
# (PLATFORM_LAYER_DIR) and bootstrap-argocd.sh (ARGOCD_LAYER_DIR).
through_layer() {
  sed 's/#.*//' "$1/$2/kustomization.yaml" | grep 'rendered\.yaml' >/dev/null \
    || die "$1/$2/kustomization.yaml does not name rendered.yaml (the install as rendered)"
  cp -rL "$1" "$4"
  mv "$3" "$4/$2/rendered.yaml"
  "${KUBECTL}" kustomize "$4/$2" > "$3"
  [[ -s "$3" ]] || die "the layer $1/$2 leaves nothing of what it was given"
}

# canonical_image REF: REF as the kubelet's CRI call names it (Docker's reference
# normalisation): a single name gets docker.io/library/, a first component that is not a
# registry (no "." or ":", not localhost) gets docker.io/.
canonical_image() {
  local first="${1%%/*}"
  if [[ "$1" != */* ]]; then echo "docker.io/library/$1"
  elif [[ "${first}" != *[.:]* && "${first}" != localhost ]]; then echo "docker.io/$1"
  else echo "$1"; fi
}

# platform_image PART DEPLOYMENT CONTAINER: the image of CONTAINER in the Deployment of
# base/platform/PART as it renders (the pinned upstream install, through the mirror when
# UPSTREAM_MIRROR_DIR is set), canonical (canonical_image). The e2e's real node gets its local
# build under this name.
# Rendering Argo's install takes seconds (12 MB of CRDs), so the answer is kept in
# ${XDG_CACHE_HOME:-~/.cache}/fashion-mnist-gitops/refs under a key that hashes everything the
# render reads (the kustomization with its mirror files copied in, the kubectl) and the question.
platform_image() {
  local dir ref key cache="${XDG_CACHE_HOME:-${HOME}/.cache}/fashion-mnist-gitops/refs"
  dir="$(mktemp -d)"
  mirror_kustomization "${REPO_ROOT}/base/platform/$1" "${dir}"
  key="$({ echo "$*"; command -v "${KUBECTL}"; (cd "${dir}" && find . -type f -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum); } | sha256sum | cut -c1-16)"
  if [[ -s "${cache}/${key}" ]]; then rm -rf "${dir}"; cat "${cache}/${key}"; return 0; fi
  "${KUBECTL}" kustomize "${dir}" > "${dir}/rendered.yaml" \
    || { rm -rf "${dir}"; die "base/platform/$1 does not render (offline? set UPSTREAM_MIRROR_DIR, or MIRROR_DIR for make)"; }
  ref="$("${PYTHON}" -c '
import sys
import yaml
deploy, container = sys.argv[1:]
for doc in yaml.load_all(sys.stdin, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"] == deploy:
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c["name"] == container:
                print(c["image"])
                sys.exit(0)
sys.exit(f"error: no container {container} in a Deployment {deploy}")
' "$2" "$3" < "${dir}/rendered.yaml")" || { rm -rf "${dir}"; die "base/platform/$1: no image for $2/$3"; }
  rm -rf "${dir}"
  ref="$(canonical_image "${ref}")"
  mkdir -p "${cache}"
  printf '%s\n' "${ref}" > "${cache}/${key}.$$" && mv "${cache}/${key}.$$" "${cache}/${key}"
  echo "${ref}"
}
