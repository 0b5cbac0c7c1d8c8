# shellcheck shell=bash
# Traefik: Knative Serving's ingress (its Knative provider, --experimental.knative), installed by
# base/platform/traefik. Recipe contract: scripts/tools.sh.
#
# Built as upstream's release builds it: CGO off, the version stamped through ldflags; the web
# UI's embed compiles from the module's placeholder (the dashboard is not served). Upstream's
# go.mod carries two fork replaces (go-http-auth, mux), taken over verbatim.
TOOL_VERSION_KEY=TRAEFIK_VERSION
TOOL_MODULE=github.com/traefik/traefik/v3
TOOL_PACKAGES=(github.com/traefik/traefik/v3/cmd/traefik)
tool_ldflags() {
  local p=github.com/traefik/traefik/v3/pkg/version
  echo "-X $p.Version=$MODULE_VERSION -X $p.Codename=fashion-mnist-e2e -X $p.BuildDate=$MODULE_TIME"
}
