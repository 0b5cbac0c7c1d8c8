# shellcheck shell=bash
# cert-manager's three programs as its pinned static install (cert-manager-<version>.yaml, the
# release asset install-platform.sh applies) runs them: the controller, the webhook and
# cainjector, each its own Go module under cmd/ of upstream's tree. Recipe contract:
# scripts/tools.sh.
#
# No module proxy can serve those three: their go.mod files name
# github.com/cert-manager/cert-manager/{controller,webhook,cainjector}-binary, paths that do not
# match their folders, and replace the root module with `../../`. Their source comes from
# upstream's tree at the release tag (tool_main_source: the offline mirror, else the tag's
# archive on GitHub), and the root module, which the proxy serves, at the same version
# replaces `../../` (scripts/tools.sh TOOL_MAIN_MODULES). The version is set as upstream's
# Makefile sets it (goldflags: pkg/util.AppVersion).
TOOL_VERSION_KEY=CERT_MANAGER_VERSION
TOOL_MODULE=github.com/cert-manager/cert-manager
TOOL_MAIN_MODULES=(
  github.com/cert-manager/cert-manager/controller-binary=cmd/controller
  github.com/cert-manager/cert-manager/webhook-binary=cmd/webhook
  github.com/cert-manager/cert-manager/cainjector-binary=cmd/cainjector
)
# each main package is its module's root
TOOL_PACKAGES=("${TOOL_MAIN_MODULES[@]%%=*}")
TOOL_BINARIES=(controller-binary=cert-manager-controller webhook-binary=cert-manager-webhook
  cainjector-binary=cert-manager-cainjector)

tool_main_source() { # DEST: upstream's cmd/{controller,webhook,cainjector} at the tag
  local mirror="${UPSTREAM_MIRROR_DIR:-${MIRROR_DIR:+$MIRROR_DIR/upstream}}" tree
  if [[ -n "$mirror" ]]; then
    # (relative to the clone, as make and .ci/run give it)
    tree="$(cd "$ROOT" && cd "$mirror" && pwd)/cert-manager-$MODULE_VERSION"
    [[ -d "$tree/cmd" ]] || { echo "cert-manager.sh: no $tree/cmd in the mirror" >&2; return 1; }
    cp -r "$tree/cmd" "$1/"
  else
    curl -fsSL "https://github.com/cert-manager/cert-manager/archive/refs/tags/$MODULE_VERSION.tar.gz" \
      | tar -xz -C "$1" --strip-components=1 "cert-manager-${MODULE_VERSION#v}/cmd"
  fi
}

tool_ldflags() { echo "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$MODULE_VERSION"; }
