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
  --abort names the version before the canary again (read from git's history) with a share
  of 0 (KServe's rollback: every request at once to the revision that served before).
--list: every published version with its selection record (model, accuracy, when, run), the
  one that git names marked.
Rollback of a promotion: git revert <its commit>, then push.
USAGE
}
for arg in "$@"; do if wants_help "${arg}"; then usage; exit 0; fi; done
[[ $# -ge 2 ]] || { usage >&2; die "ENV and VERSION (or --finish, --abort, --list) are required"; }
ENV_NAME="$(environment "$1")"; shift
ACTION="" VERSION="" CANARY="" MODELS_DIR="" COMMIT=true
# action: the one of VERSION, --finish, --abort, --list given (options go before or after it)
action() { [[ -z "${ACTION}" ]] || die "one of VERSION, --finish, --abort, --list (got ${ACTION} and $2)"; ACTION="$1"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --finish | --abort | --list) action "${1#--}" "$1"; shift ;;
    --canary)
      [[ $# -ge 2 ]] || die "--canary needs a PERCENT"
      CANARY="$2"; shift 2
      [[ "${CANARY}" =~ ^[1-9][0-9]?$ ]] || die "--canary ${CANARY}: a whole percent from 1 to 99" ;;
    --models-dir)
      [[ $# -ge 2 ]] || die "--models-dir needs a DIR"
      MODELS_DIR="$2"; shift 2 ;;
    --no-commit) COMMIT=false; shift ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) action promote "$1"; VERSION="$1"; shift ;;
  esac
done
[[ -n "${ACTION}" ]] || { usage >&2; die "VERSION (or --finish, --abort, --list) is required"; }
[[ -z "${CANARY}" || "${ACTION}" == promote ]] || die "--canary goes with a VERSION, not --${ACTION}"
[[ -z "${MODELS_DIR}" || "${ACTION}" =~ ^(promote|list)$ ]] || die "--models-dir goes with a VERSION or --list"
CANARY="${CANARY:-100}"
FILE="overlays/${ENV_NAME}/environment.yaml"

# lookup KEY TEXT: KEY's quoted value in TEXT (an environment file), one line only; else status 1.
lookup() {
  local lines
  lines="$(sed -nE "s/^  $1: \"([^\"]*)\"[[:space:]]*$/\1/p" <<<"$2")"
  [[ -n "${lines}" && "${lines}" != *$'\n'* ]] && echo "${lines}"
}

# value KEY: KEY's value in the environment file, or a one-line error.
value() {
  lookup "$1" "$(<"${REPO_ROOT}/${FILE}")" \
    || die "${FILE}: no single line '  $1: \"...\"' (the environment's value, quoted)"
}

# no_canary SHARE: true when SHARE sends every request to one revision: 100 (the latest) or 0
# (KServe's rollback: the last one rolled out, the state --abort leaves).
no_canary() { [[ "$1" == 100 || "$1" == 0 ]]; }

# canary_start: the newest commit of the environment file that started a canary (its share 1-99,
# its parent's none); the version before the canary is its parent's model-version.
canary_start() {
  local c now parent
  while read -r c; do
    now="$(lookup canary-traffic-percent "$(git -C "${REPO_ROOT}" show "${c}:${FILE}")")" || continue
    parent="$(lookup canary-traffic-percent "$(git -C "${REPO_ROOT}" show "${c}^:${FILE}" 2>/dev/null)")" || continue
    if ! no_canary "${now}" && no_canary "${parent}"; then echo "${c}"; return 0; fi
  done < <(git -C "${REPO_ROOT}" log -n 500 --format=%H -- "${FILE}")
  return 1
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

# The published versions, one line each (tab-separated): version, model, accuracy, when, runs;
# a directory that looks like a version but cannot be named (a leading zero, the layout before
# <N>/<N>/) is said on stderr. No models directory is an error.
LIST_PY='
import json, pathlib, re, sys
models = pathlib.Path(sys.argv[1])
if not models.is_dir():
    sys.exit(f"no models directory {models} (selection publishes into models/fashion-mnist)")
found = []
for d in sorted(models.iterdir(), key=lambda d: d.name):
    if not re.fullmatch("[0-9]+", d.name):
        continue
    if re.fullmatch("[1-9][0-9]*", d.name) and (d / d.name / "saved_model.pb").is_file():
        found.append(d)
    elif (d / "saved_model.pb").is_file():
        print(f"note: {d.name}/ holds the layout before <N>/<N>/: move it into {d.name}/{d.name}/",
              file=sys.stderr)
    elif not re.fullmatch("[1-9][0-9]*", d.name) and any(d.iterdir()):
        print(f"note: {d.name}/ is no version a storageUri can name (a leading zero)",
              file=sys.stderr)
for d in sorted(found, key=lambda d: int(d.name)):
    try:
        r = json.loads((d / "selection.json").read_text())
        r = r if isinstance(r, dict) else {}
    except (OSError, ValueError):
        r = {}
    acc = r.get("accuracy")
    acc = f"{acc:.4f}" if isinstance(acc, (int, float)) and not isinstance(acc, bool) else "-"
    runs = r.get("run_id") or []
    runs = ",".join(map(str, runs)) if isinstance(runs, list) else str(runs)
    print("\t".join([d.name, str(r.get("model", "-")), acc, str(r.get("published_at", "-")),
                     runs or "-"]))
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
    --rm -i --quiet --pod-running-timeout=10m --override-type=merge --overrides="${overrides}" \
    --command -- true
}

[[ "${ACTION}" == list ]] || git -C "${REPO_ROOT}" diff --quiet HEAD -- "${FILE}" 2>/dev/null \
  || die "${FILE} differs from git's HEAD (or is not in git): commit or discard that first"
current="$(value model-version)"
[[ "${current}" =~ ^[1-9][0-9]*$ ]] || die "${FILE}: model-version '${current}' is not a version (digits, no leading 0)"
share="$(value canary-traffic-percent)"
[[ "${share}" =~ ^(0|[1-9][0-9]?|100)$ ]] || die "${FILE}: canary-traffic-percent '${share}' is not 0 to 100"
case "${ACTION}" in
  list)
    if [[ -n "${MODELS_DIR}" ]]; then rows="$("${PYTHON}" -c "${LIST_PY}" "${MODELS_DIR}")" || die "cannot list ${MODELS_DIR} (see above)"
    else rows="$(on_volume "${LIST_PY}")" || die "cannot list the cluster's volume: ${rows:-see above}"; fi
    before=""  # during a canary: the version that gets the rest of the requests
    if ! no_canary "${share}" && rev="$(canary_start)"; then
      before="$(lookup model-version "$(git -C "${REPO_ROOT}" show "${rev}^:${FILE}")")" || before=""
    fi
    printf 'VERSION\tMODEL\tACCURACY\tPUBLISHED\tRUNS\tNAMED IN %s\n' "${FILE}"
    while IFS=$'\t' read -r v fields; do
      [[ -n "${v}" ]] || continue
      mark=""
      if [[ "${v}" == "${current}" ]]; then mark="model-version"; fi
      if [[ -n "${mark}" ]] && ! no_canary "${share}"; then mark+=" (canary at ${share} %)"; fi
      if [[ "${v}" == "${before}" ]]; then mark="before the canary ($((100 - share)) %)"; fi
      printf '%s\t%s\t%s\n' "${v}" "${fields}" "${mark}"
    done <<<"${rows}"
    exit 0 ;;
  promote)
    VERSION="$(version_number "${VERSION}")"
    if [[ "${VERSION}" == "${current}" ]]; then
      if no_canary "${share}" && [[ "${CANARY}" == 100 ]]; then
        log "${ENV_NAME} already serves version ${VERSION}: nothing to commit"; exit 0
      fi
      die "${ENV_NAME} names version ${VERSION} already (canary-traffic-percent ${share}): a canary needs another version"
    fi
    no_canary "${share}" \
      || die "${ENV_NAME} has a canary running (version ${current} at ${share} %): --finish or --abort it first"
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
    no_canary "${share}" && die "${ENV_NAME} has no canary running (canary-traffic-percent is ${share})"
    set_value canary-traffic-percent 100
    msg="promote ${ENV_NAME}: finish the canary, every request to model version ${current}" ;;
  abort)
    # the version before the canary, with a share of 0: KServe's rollback sends every request at
    # once to the revision rolled out before the canary (with 100, the canary's revision would
    # take them all until the new revision of the old version is ready)
    no_canary "${share}" && die "${ENV_NAME} has no canary running (canary-traffic-percent is ${share})"
    rev="$(canary_start)" || die "no commit in ${FILE}'s history started this canary (a share below 100 after none)"
    previous="$(lookup model-version "$(git -C "${REPO_ROOT}" show "${rev}^:${FILE}")")" \
      || die "cannot read model-version in ${FILE} before ${rev}"
    [[ "${previous}" =~ ^[1-9][0-9]*$ && "${previous}" != "${current}" ]] \
      || die "the version before the canary (${previous}, before ${rev:0:12}) is no other version than ${current}"
    set_value model-version "${previous}"
    set_value canary-traffic-percent 0
    msg="promote ${ENV_NAME}: abort the canary of model version ${current}, back to ${previous}" ;;
esac
if [[ "${COMMIT}" == false ]]; then log "edited ${FILE} (not committed): ${msg}"; exit 0; fi
commit_file "${FILE}" "${msg}"
log "next: git push (Argo CD syncs it; scripts/deploy.sh ${ENV_NAME} without Argo CD)"
