# shellcheck shell=bash
# Knative Serving: the controller, webhook, activator and autoscaler that the e2e runs as the pods
# of the pinned release, and queue (the queue-proxy sidecar of every revision's pod). Recipe
# contract: scripts/tools.sh.
#
# Knative publishes each release's Go module as v0.<minor+27>.<patch> (knative-v1.23.0 is
# knative.dev/serving v0.50.0, the same commit), so the version is derived from
# KNATIVE_SERVING_VERSION, the release the manifests install.
TOOL_VERSION_KEY=KNATIVE_SERVING_VERSION
TOOL_MODULE=knative.dev/serving
TOOL_PACKAGES=(
  knative.dev/serving/cmd/controller
  knative.dev/serving/cmd/webhook
  knative.dev/serving/cmd/activator
  knative.dev/serving/cmd/autoscaler
  knative.dev/serving/cmd/queue
)
# exposed under names of their own (--bin knative-controller ...): the packages' names are generic
TOOL_BINARIES=(controller=knative-controller webhook=knative-webhook activator=knative-activator
  autoscaler=knative-autoscaler queue=knative-queue)
tool_module_version() { # v1.23.0 -> v0.50.0 (Knative's module numbering)
  local v="${1#v}" major minor patch
  IFS=. read -r major minor patch <<<"$v"
  [[ "$major" == 1 && "$minor" =~ ^[0-9]+$ && "$patch" =~ ^[0-9]+$ ]] \
    || { echo "knative-serving.sh: cannot map Knative release '$1' to its module version" >&2; return 1; }
  echo "v0.$((minor + 27)).$patch"
}
