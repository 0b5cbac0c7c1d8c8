# shellcheck shell=bash
# KServe controller manager (cmd/manager: InferenceService reconciler + its webhooks, incl. the
# pod mutator that injects the storage initializer), run by the e2e as a local process under
# its own ServiceAccount. Upstream's replaces (controller-runtime, k8s.io/* v0.34, grpc,
# expr, protoc-gen-validate) are carried over by scripts/tools.sh. Recipe contract there.
TOOL_VERSION_KEY=KSERVE_VERSION
TOOL_MODULE=github.com/kserve/kserve
TOOL_PACKAGES=(github.com/kserve/kserve/cmd/manager)
TOOL_BINARIES=(manager=kserve-manager)
