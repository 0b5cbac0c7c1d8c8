# shellcheck shell=bash
# KServe's controllers as its pinned install (base/platform/kserve) runs them, one binary each
# (upstream's Dockerfile, llmisvc-controller.Dockerfile, localmodel.Dockerfile: `go build
# ./cmd/<CMD>`, the binary at /manager): cmd/manager (kserve-controller-manager: the
# InferenceService reconciler and its webhooks, incl. the pod mutator that injects the storage
# initializer), cmd/llmisvc (llmisvc-controller-manager) and cmd/localmodel
# (kserve-localmodel-controller-manager). The e2e runs them as the pods of that install
# (scripts/e2e-images.sh). Upstream's replaces (controller-runtime, k8s.io/* v0.34, grpc, expr,
# protoc-gen-validate) are carried over by scripts/tools.sh. Recipe contract there.
TOOL_VERSION_KEY=KSERVE_VERSION
TOOL_MODULE=github.com/kserve/kserve
TOOL_PACKAGES=(
  github.com/kserve/kserve/cmd/manager
  github.com/kserve/kserve/cmd/llmisvc
  github.com/kserve/kserve/cmd/localmodel
)
TOOL_BINARIES=(manager=kserve-manager llmisvc=kserve-llmisvc localmodel=kserve-localmodel)
