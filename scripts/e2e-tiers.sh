#!/usr/bin/env bash
# The e2e's tiers. The core (the control plane, the real node, the platform's install, the
# pipeline) always runs; each tier beside it names the Go tools (hack/tools/) and images
# (scripts/e2e-images.sh) that only it needs, and the test modules that only it runs. A cold
# .ci/run skips a tier whose tools are not built in the time its budget leaves (`plan`), and says
# so loudly; `make e2e E2E_SKIP_TIERS="TIER..."` skips one by hand. What no tier names is the
# core's. docs/e2e.md, "Tiers", has the schedule; docs/results.md the runs behind the seconds below.
#
# Usage:
#   scripts/e2e-tiers.sh tools [--core]   the recipes `make e2e` builds: every recipe but those of
#                                         the tiers in E2E_SKIP_TIERS (--core: of every tier)
#   scripts/e2e-tiers.sh tools --tiers    the tiers' recipes, tier by tier in TIERS order (the
#                                         order .ci/run builds them in, and `plan` waits in)
#   scripts/e2e-tiers.sh images [--core]  likewise, the images of scripts/e2e-images.sh
#   scripts/e2e-tiers.sh pytest-args      pytest's --ignore=MODULE for each skipped tier's tests
#   scripts/e2e-tiers.sh report           one loud line per tier in E2E_SKIP_TIERS (and each tier
#                                         that needs one of them): what did not run, and how to run it
#   scripts/e2e-tiers.sh seconds [TIER]  the seconds `plan` keeps for the core (or TIER) on this
#                                         machine's CPU, and the CPU's kind (cpu_kind); `seconds
#                                         test`: those of `make test` alone
#   scripts/e2e-tiers.sh tiers           the tiers' names, one per line
#   scripts/e2e-tiers.sh plan DEADLINE [PID]
#                                         the tiers to skip (one line, space-separated) so that
#                                         `make e2e` ends by DEADLINE (Unix seconds): a tier whose
#                                         tools are built runs; otherwise, while PID (the build
#                                         of its tools) runs, it waits as long as the budget
#                                         allows; a tier still not built then is skipped, and why
#                                         is said on stderr
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "$ROOT/scripts/lib.sh" # (its die is redefined below: this script's name on each message)
TOOLS="$ROOT/scripts/tools.sh"

# Seconds of a warm `make e2e` on each kind of CPU the CI machines have been (docs/results.md
# has the runs), with room: the core with the cluster's start and teardown, with `make test`
# beside it as .ci/run runs it (Intel: 1,681 s measured; AMD: an estimate, its run without it
# plus the Intel's difference), then each tier's own tests. `plan` keeps this much. The kind:
# cpu_kind below.
declare -A CORE_E2E_SECONDS=([intel]=1750 [amd]=1950)
# Seconds of `make test` alone on each kind (docs/results.md: Intel 703-706 s, AMD 826-872 s),
# with room: what a cold .ci/run keeps for it before an e2e with a tier (`seconds test`).
declare -A UNIT_TEST_SECONDS=([intel]=800 [amd]=950)
TIERS=(serving gitops pulumi)
# serving: KServe's predictor with its agent and message-dumper on the real node, in both modes:
# Standard mode's HPA (metrics-server) under Locust, and Serverless mode: Knative Serving and
# Traefik as pods (without this tier the platform has Knative's CRDs only: tests/e2e/
# controllers.py serverless), scale from and to zero, `hey` and Locust through the ingress
serving_TOOLS=(kserve-agent metrics-server event-display knative-serving traefik)
serving_IMAGES=(agent event_display knative_controller knative_webhook knative_activator
  knative_autoscaler knative_queue traefik)
serving_TESTS=(tests/e2e/test_real_serving.py tests/e2e/test_serverless.py)
serving_NEEDS=()
declare -A serving_E2E_SECONDS=([intel]=780 [amd]=800)
# gitops: Argo CD (its one binary, with kustomize and git in its image) and Redis as the pods of
# argocd/install on the real node, bootstrapped by scripts/bootstrap-argocd.sh from a git server
# of the run, syncing every Application; pushes through the webhook and by polling
gitops_TOOLS=(argocd kustomize)
gitops_IMAGES=(argocd redis ml_next)
gitops_TESTS=(tests/e2e/test_argocd.py)
# Argo CD syncs Knative's settings and Traefik (argocd/apps), which run only with the serving tier
gitops_NEEDS=(serving)
declare -A gitops_E2E_SECONDS=([intel]=720 [amd]=750)
# pulumi: scripts/pulumi.sh up/preview/destroy of the ML layer (pulumi/) with the CLI and the
# Kubernetes provider built here; no image (its --train run's pods stay Pending: no volume)
pulumi_TOOLS=(pulumi pulumi-kubernetes)
pulumi_IMAGES=()
pulumi_TESTS=(tests/e2e/test_pulumi.py)
pulumi_NEEDS=()
declare -A pulumi_E2E_SECONDS=([intel]=120 [amd]=150)

die() { echo "e2e-tiers.sh: $*" >&2; exit 1; }

# The kind of this machine's CPU, whose measured seconds `plan` keeps: E2E_CPU when set (intel or
# amd), else the vendor /proc/cpuinfo names (GenuineIntel, AuthenticAMD); any other CPU is taken
# as amd, the kind with the larger seconds.
cpu_kind() {
  local kind="${E2E_CPU:-}"
  if [[ -z "$kind" ]]; then
    case "$(sed -n 's/^vendor_id[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n1)" in
      GenuineIntel) kind=intel ;;
      *) kind=amd ;;
    esac
  fi
  [[ -n "${CORE_E2E_SECONDS[$kind]:-}" ]] || die "E2E_CPU: no seconds for a CPU '$kind' (have: ${!CORE_E2E_SECONDS[*]})"
  echo "$kind"
}
CPU="$(cpu_kind)"
say() { echo "e2e-tiers.sh: $*" >&2; }

# The tiers in E2E_SKIP_TIERS, each checked against TIERS.
SKIP=()
read -ra words <<<"${E2E_SKIP_TIERS:-}" # (words, no filename expansion)
for t in "${words[@]}"; do
  [[ " ${TIERS[*]} " == *" $t "* ]] || die "E2E_SKIP_TIERS: no tier named '$t' (have: ${TIERS[*]})"
  [[ " ${SKIP[*]} " == *" $t "* ]] || SKIP+=("$t")
done

# needs_skipped TIER SKIPPED...: the first tier TIER needs (its _NEEDS) among SKIPPED; fails if none
needs_skipped() {
  local -n needs="$1_NEEDS"
  local n
  shift
  for n in "${needs[@]}"; do
    if [[ " $* " == *" $n "* ]]; then echo "$n"; return 0; fi
  done
  return 1
}
# a tier whose needed tier is skipped is skipped too (in TIERS order: needs come first); why, for
# `report`
declare -A WHY=()
for t in "${SKIP[@]}"; do WHY[$t]="E2E_SKIP_TIERS"; done
SKIP=()
for t in "${TIERS[@]}"; do
  if [[ -z "${WHY[$t]:-}" ]] && n="$(needs_skipped "$t" "${!WHY[@]}")"; then
    WHY[$t]="it needs tier $n, skipped"
  fi
  if [[ -n "${WHY[$t]:-}" ]]; then SKIP+=("$t"); fi # (in TIERS order)
done

tier_items() { # TIER KIND -> the tier's TOOLS, IMAGES or TESTS, one per line
  local -n items="$1_$2"
  printf '%s\n' "${items[@]}"
}

# Every name of ALL (one per line on stdin) but those of the given tiers' KIND.
without() { # KIND TIER...
  local kind="$1" t
  shift
  grep -vxF -f <(for t in "$@"; do tier_items "$t" "$kind"; done; echo "") || true
}

tier_built() { # TIER: its tools are all in the cache (the images take seconds once they are)
  local missing
  missing="$("$TOOLS" --list | awk '$NF != "built" {print $1}' | grep -xF -f <(tier_items "$1" TOOLS))" || true
  [[ -z "$missing" ]]
}

tier_seconds() { local -n s="$1_E2E_SECONDS"; echo "${s[$CPU]}"; }

# The seconds the tiers after the one at index $1 need that are built already (they will run).
built_after() {
  local i sum=0
  for ((i = $1 + 1; i < ${#TIERS[@]}; i++)); do
    if tier_built "${TIERS[$i]}"; then sum=$((sum + $(tier_seconds "${TIERS[$i]}"))); fi
  done
  echo "$sum"
}

plan() { # DEADLINE [PID]
  local deadline="$1" pid="${2:-}" t i running="${CORE_E2E_SECONDS[$CPU]}" need left
  [[ "$deadline" =~ ^[1-9][0-9]*$ ]] || die "plan: DEADLINE must be Unix seconds, got '$deadline'"
  [[ -z "$pid" || "$pid" =~ ^[1-9][0-9]*$ && "$pid" -gt 1 ]] \
    || die "plan: PID must be the id of the build's process, got '$pid'"
  local -a skip=()
  local behind=""  # a tier skipped while its tools were still building
  # In TIERS order (the order .ci/run builds their tools in): a tier is waited for while the e2e
  # still fits with the core, the tiers already kept, this one and the later ones already built;
  # a later tier not built yet is judged in its turn (the time of a skipped one is not kept).
  # Once a tier is skipped with its tools still building, a later tier not built yet is skipped
  # at once: its tools build after those, so waiting for it would only spend the budget.
  for i in "${!TIERS[@]}"; do
    t="${TIERS[$i]}"
    if n="$(needs_skipped "$t" "${skip[@]}")"; then
      skip+=("$t")
      say "SKIPPING tier $t: it needs tier $n, skipped"
      continue
    fi
    if [[ -n "$behind" ]] && ! tier_built "$t"; then
      skip+=("$t")
      say "SKIPPING tier $t: its tools ($(tier_items "$t" TOOLS | tr '\n' ' ' | sed 's/ $//')) are" \
        "not built, and they build after tier $behind's, which did not end in the budget"
      continue
    fi
    need=$((running + $(tier_seconds "$t") + $(built_after "$i")))
    while ! tier_built "$t" && [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
      && (($(date +%s) + need < deadline)); do
      sleep 5
      need=$((running + $(tier_seconds "$t") + $(built_after "$i")))
    done
    if tier_built "$t"; then running=$((running + $(tier_seconds "$t"))); continue; fi
    left=$((deadline - $(date +%s)))
    skip+=("$t")
    tools="$(tier_items "$t" TOOLS | tr '\n' ' ' | sed 's/ $//')"
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null && ((left > need)); then
      say "SKIPPING tier $t: its tools ($tools) are not built, and their build ($pid) has ended"
    else
      say "SKIPPING tier $t: its tools ($tools) are not built, and ${left} s are left of the" \
        "budget, where the e2e needs about ${need} s with it (${CORE_E2E_SECONDS[$CPU]} s the" \
        "core's, $(tier_seconds "$t") s this tier's, measured on CPUs of the kind $CPU)"
      if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then behind="$t"; fi
    fi
  done
  echo "${skip[*]}"
}

report() {
  local t
  for t in "${SKIP[@]}"; do
    say "SKIPPED tier $t (${WHY[$t]}): $(tier_items "$t" TESTS | tr '\n' ' ')did not run." \
      "To run it: make e2e without E2E_SKIP_TIERS (it builds the tier's tools and images first;" \
      "or make tools e2e-images ahead; docs/e2e.md, \"Tiers\")"
  done
}

case "${1:-}" in
  tools | images)
    kind=TOOLS list="$("$TOOLS" --list | cut -d' ' -f1)"
    if [[ "$1" == images ]]; then kind=IMAGES list="$("$ROOT/scripts/e2e-images.sh" --names)"; fi
    if [[ "${2:-}" == --core ]]; then without "$kind" "${TIERS[@]}" <<<"$list"
    elif [[ "${2:-}" == --tiers ]]; then for t in "${TIERS[@]}"; do tier_items "$t" "$kind"; done
    elif [[ -z "${2:-}" ]]; then without "$kind" "${SKIP[@]}" <<<"$list"
    else die "usage: $0 $1 [--core|--tiers]"; fi ;;
  seconds)
    if [[ -z "${2:-}" || "$2" == core ]]; then echo "${CORE_E2E_SECONDS[$CPU]} $CPU"
    elif [[ "$2" == test ]]; then echo "${UNIT_TEST_SECONDS[$CPU]} $CPU"
    elif [[ " ${TIERS[*]} " == *" $2 "* ]]; then echo "$(tier_seconds "$2") $CPU"
    else die "seconds: no tier named '$2' (have: core test ${TIERS[*]})"; fi ;;
  tiers) printf '%s\n' "${TIERS[@]}" ;;
  pytest-args) for t in "${SKIP[@]}"; do tier_items "$t" TESTS | sed 's/^/--ignore=/'; done ;;
  report) report ;;
  plan) [[ $# -ge 2 ]] || die "usage: $0 plan DEADLINE [PID]"; plan "$2" "${3:-}" ;;
  -h | --help)
    echo "usage: scripts/e2e-tiers.sh tools|images [--core|--tiers] | pytest-args | report | seconds [PART] | tiers | plan DEADLINE [PID]"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "usage: scripts/e2e-tiers.sh tools|images [--core|--tiers] | pytest-args | report | seconds [PART] | tiers | plan DEADLINE [PID] (see --help)" ;;
esac
