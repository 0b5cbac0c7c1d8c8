# shellcheck shell=bash
# kubeconform, run by `make validate` (strict, against the Kubernetes and CRD schemas).
# Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=KUBECONFORM_VERSION
TOOL_MODULE=github.com/yannh/kubeconform
TOOL_PACKAGES=(github.com/yannh/kubeconform/cmd/kubeconform)
tool_ldflags() { echo "-X main.version=$MODULE_VERSION"; }
