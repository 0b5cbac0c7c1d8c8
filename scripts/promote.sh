#!/usr/bin/env bash
# Promotion as a commit: name in git the model version an environment serves (and the canary's
# share of traffic), after checking that selection published that version. Argo CD (or
# scripts/deploy.sh) then rolls it out; `git revert` of the commit is the rollback.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() {
  cat <<USAGE
usage: scripts/promote.sh ENV VERSION [--canary PERCENT] [--models-dir DIR] [--no-commit]
       scripts/promote.sh ENV --finish | --abort [--no-commit]
       scripts/promote.sh ENV --list [--models-dir DIR]
Sets model-version (and canary-traffic-percent) in overlays/ENV/environment.yaml and commits
that one file; push it and Argo CD syncs it. VERSION must be published by selection: its
record models/fashion-mnist/VERSION/selection.json and its SavedModel VERSION/VERSION/ are read
from DIR (--models-dir, e.g. work/models/fashion-mnist of make demo) or else from the cluster's
volume (a short pod of the pipeline's image in namespace ${NAMESPACE}).
--canary PERCENT (1-99): the new version gets about PERCENT % of the requests, the version
  serving now the rest (KServe's canary rollout); --finish then sends it every request,
  --abort goes back to the version before the canary (read from git's history).
--list: every published version with its selection record (model, accuracy, when, run), the
  one that git names marked.
Rollback of a promotion: git revert <its commit>, then push.
USAGE
}
if wants_help "${1:-}"; then usage; exit 0; fi
[[ $# -ge 2 ]] || { usage >&2; die "ENV and VERSION (or --finish/--abort) are required"; }
ENV_NAME="$(environment "$1")"; shift
ACTION=promote VERSION="" CANARY=100 MODELS_DIR="" COMMIT=true
case "$1" in
  --finish) ACTION=finish; shift ;;
  --abort) ACTION=abort; shift ;;
  --list) ACTION=list; shift ;;
  -*) usage >&2; die "VERSION (or --finish/--abort) comes after ENV, got $1" ;;
  *) VERSION="$1"; shift ;;
esac
while [[ $# -gt 0 ]]; do
  case "$1" in
    --canary)
      [[ $# -ge 2 && "${ACTION}" == promote ]] || die "--canary needs a PERCENT and a VERSION"
      CANARY="$2"; shift 2
      [[ "${CANARY}" =~ ^[1-9][0-9]?$ ]] || die "--canary ${CANARY}: a whole percent from 1 to 99" ;;
    --models-dir)
      [[ $# -ge 2 && "${ACTION}" =~ ^(promote|list)$ ]] || die "--models-dir needs a DIR, and a VERSION or --list"
      MODELS_DIR="$2"; shift 2 ;;
    --no-commit) COMMIT=false; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done
FILE="overlays/${ENV_NAME}/environment.yaml"

# value KEY [TEXT]: KEY's quoted value in the environment file (or in TEXT), one line only.
value() {
  local text lines
  if [[ $# -ge 2 ]]; then text="$2"; else text="$(<"${REPO_ROOT}/${FILE}")"; fi
  lines="$(sed -nE "s/^  $1: \"([^\"]*)\"[[:space:]]*$/\1/p" <<<"${text}")"
  [[ -n "${lines}" && "${lines}" != *$'\n'* ]] \
    || die "${FILE}: no single line '  $1: \"...\"' (the environment's value, quoted)"
  echo "${lines}"
}

# set_value KEY VALUE: rewrite that one line, keeping every comment and key around it.
set_value() {
  sed -i -E "s/^(  $1: )\"[^\"]*\"([[:space:]]*)$/\1\"$2\"\2/" "${REPO_ROOT}/${FILE}"
  [[ "$(value "$1")" == "$2" ]] || die "${FILE}: $1 was not set to $2"
}

# version_number TEXT: TEXT if it is a TF Serving model version (ASCII digits, 1 to int64).
version_number() {
  [[ "$1" =~ ^[0-9]+$ ]] && "${PYTHON}" -c 'import sys; sys.exit(not 1 <= int(sys.argv[1]) < 2**63)' "$1" \
    || die "model version '$1': ASCII digits, 1 to 9223372036854775807"
  echo "$((10#$1))"
}

# The one check of a published version, run on this machine (--models-dir) or in a pod on the
# volume: its SavedModel and its selection record, which selection writes only for a candidate
# that passed (--min-accuracy) and was published whole (training/select.py).
CHECK_PY='
import json, pathlib, sys
models, v = pathlib.Path(sys.argv[1]), sys.argv[2]
if not (models / v / v / "saved_model.pb").is_file():
    sys.exit(f"version {v} is not published in {models} (no {v}/{v}/saved_model.pb)")
try:
    record = json.loads((models / v / "selection.json").read_text())
except (OSError, ValueError) as exc:
    sys.exit(f"version {v} has no readable selection record: {exc}")
got = record.get("version")
if got != int(v):
    sys.exit(f"the selection record of {v} names version {got}")
print(json.dumps(record))
'

# The published versions, one line each (tab-separated): version, model, accuracy, when, runs.
LIST_PY='
import json, pathlib, re, sys
models = pathlib.Path(sys.argv[1])
found = [d for d in (models.iterdir() if models.is_dir() else ())
         if re.fullmatch("[0-9]+", d.name) and (d / d.name / "saved_model.pb").is_file()]
for d in sorted(found, key=lambda d: int(d.name)):
    try:
        r = json.loads((d / "selection.json").read_text())
    except (OSError, ValueError):
        r = {}
    acc = r.get("accuracy")
    acc = f"{acc:.4f}" if isinstance(acc, float) else "-"
    runs = ",".join(r.get("run_id") or []) or "-"
    print("\t".join([d.name, str(r.get("model", "-")), acc, str(r.get("published_at", "-")), runs]))
'

# on_volume PROGRAM [ARGS]: python PROGRAM MODELS-DIR ARGS, run by a pod of the pipeline's image
# that mounts (read-only) the volume the live InferenceService serves from; its output.
on_volume() {
  local uri image claim path overrides
  kubectl_for_cluster
  uri="$("${KUBECTL}" get inferenceservice fashion-mnist -n "${NAMESPACE}" \
    -o 'jsonpath={.spec.predictor.model.storageUri}' 2>/dev/null)" \
    || die "cannot read inferenceservice/fashion-mnist in ${NAMESPACE}: deploy first, or check a local copy with --models-dir DIR"
  [[ "${uri}" =~ ^pvc://([^/]+)/(.+)/[0-9]+$ ]] || die "the live storageUri '${uri}' is not pvc://CLAIM/PATH/VERSION"
  claim="${BASH_REMATCH[1]}" path="${BASH_REMATCH[2]}"
  image="$("${KUBECTL}" get workflowtemplate "${PIPELINE}" -n "${NAMESPACE}" \
    -o 'jsonpath={.spec.arguments.parameters[?(@.name=="image")].value}')" \
    || die "cannot read the pipeline's image from workflowtemplate/${PIPELINE}"
  overrides="$("${PYTHON}" -c '
import json, sys
claim, path, image, program, *args = sys.argv[1:]
restricted = {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
container = {"name": "check", "image": image, "imagePullPolicy": "IfNotPresent",
             "command": ["python", "-c", program, "/mnt/shared/" + path, *args],
             "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                           "limits": {"cpu": "500m", "memory": "256Mi"}},
             "securityContext": restricted,
             "volumeMounts": [{"name": "shared", "mountPath": "/mnt/shared", "readOnly": True}]}
print(json.dumps({"spec": {"containers": [container], "restartPolicy": "Never",
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]}}))
' "${claim}" "${path}" "${image}" "$@")"
  "${KUBECTL}" run "promote-check-$$" -n "${NAMESPACE}" --image="${image}" --restart=Never \
    --rm -i --quiet --pod-running-timeout=3m --override-type=merge --overrides="${overrides}" \
    --command -- true
}

[[ "${ACTION}" == list ]] || git -C "${REPO_ROOT}" diff --quiet HEAD -- "${FILE}" 2>/dev/null \
  || die "${FILE} differs from git's HEAD (or is not in git): commit or discard that first"
current="$(version_number "$(value model-version)")"
share="$(value canary-traffic-percent)"
[[ "${share}" =~ ^[0-9]+$ && "${share}" -ge 1 && "${share}" -le 100 ]] \
  || die "${FILE}: canary-traffic-percent '${share}' is not 1 to 100"
case "${ACTION}" in
  list)
    if [[ -n "${MODELS_DIR}" ]]; then rows="$("${PYTHON}" -c "${LIST_PY}" "${MODELS_DIR}")"
    else rows="$(on_volume "${LIST_PY}")" || die "cannot list the cluster's volume: ${rows:-see above}"; fi
    printf 'VERSION\tMODEL\tACCURACY\tPUBLISHED\tRUNS\tSERVED (%s)\n' "${FILE}"
    while IFS=$'\t' read -r v rest; do
      [[ -n "${v}" ]] || continue
      mark=""
      if [[ "${v}" == "${current}" ]]; then mark="model-version"; fi
      if [[ -n "${mark}" && "${share}" != 100 ]]; then mark+=" (canary at ${share} %)"; fi
      printf '%s\t%s\t%s\n' "${v}" "${rest}" "${mark}"
    done <<<"${rows}"
    exit 0 ;;
  promote)
    VERSION="$(version_number "${VERSION}")"
    [[ "${VERSION}" != "${current}" || "${CANARY}" != "${share}" ]] \
      || { log "${ENV_NAME} already serves version ${VERSION} (canary ${share} %): nothing to commit"; exit 0; }
    [[ "${share}" == 100 ]] \
      || die "${ENV_NAME} has a canary running (version ${current} at ${share} %): --finish or --abort it first"
    [[ "${VERSION}" != "${current}" ]] || die "${ENV_NAME} serves version ${VERSION} already: a canary needs another version"
    if [[ -n "${MODELS_DIR}" ]]; then
      record="$("${PYTHON}" -c "${CHECK_PY}" "${MODELS_DIR}" "${VERSION}")" || die "refused: see above"
    else
      # the pod's stderr may reach stdout (kubectl run shows a pod that ended before it attached
      # by its log): said in the refusal
      record="$(on_volume "${CHECK_PY}" "${VERSION}")" \
        || die "refused, as read on the cluster's volume: ${record:-(no output; see above)}"
    fi
    log "version ${VERSION} passed selection: ${record}"
    set_value model-version "${VERSION}"
    set_value canary-traffic-percent "${CANARY}"
    if [[ "${CANARY}" == 100 ]]; then msg="promote ${ENV_NAME}: serve model version ${VERSION} (was ${current})"
    else msg="promote ${ENV_NAME}: canary of model version ${VERSION} at ${CANARY} % (the rest: ${current})"; fi ;;
  finish)
    [[ "${share}" != 100 ]] || die "${ENV_NAME} has no canary running (canary-traffic-percent is 100)"
    set_value canary-traffic-percent 100
    msg="promote ${ENV_NAME}: finish the canary, every request to model version ${current}" ;;
  abort)
    [[ "${share}" != 100 ]] || die "${ENV_NAME} has no canary running (canary-traffic-percent is 100)"
    rev="$(git -C "${REPO_ROOT}" log -n1 --format=%H -G '^  model-version:' -- "${FILE}")"
    [[ -n "${rev}" ]] || die "no commit in git's history set model-version in ${FILE}"
    before="$(git -C "${REPO_ROOT}" show "${rev}^:${FILE}")" || die "cannot read ${FILE} before ${rev}"
    previous="$(version_number "$(value model-version "${before}")")"
    set_value model-version "${previous}"
    set_value canary-traffic-percent 100
    msg="promote ${ENV_NAME}: abort the canary of model version ${current}, back to ${previous}" ;;
esac
if [[ "${COMMIT}" == false ]]; then log "edited ${FILE} (not committed): ${msg}"; exit 0; fi
git -C "${REPO_ROOT}" commit -q -m "${msg}" -- "${FILE}" || die "git commit of ${FILE} failed (see above)"
log "committed: ${msg}"
log "next: git push (Argo CD syncs it; scripts/deploy.sh ${ENV_NAME} without Argo CD)"
