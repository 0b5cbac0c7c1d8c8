# shellcheck shell=bash
# kube-rbac-proxy, the sidecar of KServe's kserve-controller-manager Deployment (it serves the
# manager's metrics behind TokenReview/SubjectAccessReview), built as upstream's Makefile
# builds it (cmd/kube-rbac-proxy, component-base version variables) for the e2e's image of it
# (scripts/e2e-images.sh). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=KUBE_RBAC_PROXY_VERSION
TOOL_MODULE=github.com/brancz/kube-rbac-proxy
TOOL_PACKAGES=(github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy)
tool_ldflags() {
  echo "-X k8s.io/component-base/version.gitVersion=$MODULE_VERSION" \
    "-X k8s.io/component-base/version/verflag.programName=kube-rbac-proxy"
}
