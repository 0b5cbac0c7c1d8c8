#!/usr/bin/env bash
# The images the e2e's real node runs (scripts/e2e-node.sh imports them; nothing is pulled
# from a registry), built here with buildah (Debian) and the runc of scripts/tools.sh, into a
# cache OUTSIDE the clone keyed by each image's recipe and inputs: a second run rebuilds
# nothing. Each image's recipe is the function named after it below.
#
#   pause      registry.k8s.io/pause:PAUSE_VERSION  k8s.io/kubernetes' build/pause/linux/pause.c
#              (upstream's CFLAGS, FROM scratch, USER 65535:65535)
#   python     fmnist-python-base:3.11-bookworm       debootstrap minbase + Debian's python3 and
#              pip (the Dockerfile's PYTHON_BASE_IMAGE; python:3.11-slim cannot be pulled here)
#   ml         the pipeline's `image` as overlays/local-k3d renders it, from the repo's
#              Dockerfile (buildah bud --layers: a change to src/ rebuilds only its last layer)
#   ml_torch   the same reference with the tag suffix -torch (the PyTorchJob's image, as the
#              WorkflowTemplate names it): the same Dockerfile with EXTRAS=torch (PyPI's CUDA
#              wheel and its nvidia-* dependencies, about 8 GB; the layers before EXTRAS are ml's)
#   ml_next    localhost/fmnist-e2e/ml-next:marker   ml with one more file, hack/e2e/src-marker.txt
#              as /opt/app/src/e2e-marker.txt: what the Dockerfile builds from a tree with that
#              test-only change under src/ (a layer over ml, as `docker build`'s cache would
#              give). tests/e2e/test_argocd.py names it with the content tag of that tree
#              (tier gitops)
#   argoexec   quay.io/argoproj/argoexec:ARGO_WORKFLOWS_E2E_VERSION   the executor scripts/tools.sh
#              built (hack/tools/argo.sh), FROM scratch like upstream's distroless image:
#              /bin/argoexec, /tmp 1777 (resource steps write /tmp/manifest.yaml), USER 8737
#   agent      kserve/agent:KSERVE_VERSION   KServe's agent (hack/tools/kserve-agent.sh), the name
#              KServe's inferenceservice-config gives it; FROM scratch like upstream's
#              distroless static:nonroot: /ko-app/agent, USER 65532 (the pod mutator sets no
#              command: the ENTRYPOINT must be the agent)
#   busybox    docker.io/library/alpine:3.10   Debian's busybox-static (apt; .ci/run installs
#              it) under the name of training-operator's --pytorch-init-container-image default
#              (pkg/config/config.go), which cannot be pulled here: sh, sed, seq, sleep and
#              nslookup, what the init container it adds to each PyTorchJob Worker runs
#              (Alpine's are busybox too)
#   event_display  localhost/fmnist-e2e/event-display:EVENT_DISPLAY_VERSION   Knative's
#              event_display (hack/tools/event-display.sh), message-dumper's program, FROM
#              scratch: /ko-app/event_display, USER 65532. A local name: the manifests pin
#              upstream's image by digest, which a rebuild cannot match
#   The platform's controllers, each under the image name its Deployment in base/platform
#   renders with (lib.sh platform_image: the pinned install, so the pods of the README's own
#   install run them), its Go binary FROM scratch laid out like upstream's image:
#   training_operator  training-operator (hack/tools/training-operator.sh) at /manager, as
#              upstream's distroless static image (user root, as upstream's)
#   workflow_controller, argocli  Argo's workflow-controller and argo (hack/tools/argo.sh) at
#              /bin, USER 8737, as upstream's Dockerfile. Built from ARGO_WORKFLOWS_E2E_VERSION
#              under the names of the installed ARGO_WORKFLOWS_VERSION, which
#              the Go module proxy does not serve (docs/e2e-controllers.md)
#   kserve_controller, kserve_llmisvc, kserve_localmodel  KServe's three controller managers
#              (hack/tools/kserve.sh) at /manager, USER 65532, as upstream's Dockerfiles on
#              distroless static:nonroot (two of its Deployments ask runAsNonRoot without a
#              user: the image's must be numeric; llmisvc's sets runAsUser 1000)
#   cert_manager_controller, cert_manager_webhook, cert_manager_cainjector  cert-manager's three
#              programs (hack/tools/cert-manager.sh), each alone as upstream's images are built
#              (ko on distroless static, makefile-modules' oci-build): /ko-app/NAME, USER 65532
#              (its Deployments ask runAsNonRoot without a user: the image's must be numeric)
#   kube_rbac_proxy  the sidecar of kserve-controller-manager (hack/tools/kube-rbac-proxy.sh) at
#              /usr/local/bin/kube-rbac-proxy, USER 65532, as upstream's Dockerfile; its tag must
#              be KUBE_RBAC_PROXY_VERSION, the version built
#   knative_controller, knative_webhook, knative_activator, knative_autoscaler, knative_queue
#              Knative Serving's programs (hack/tools/knative-serving.sh) as `ko` builds them
#              (/ko-app/NAME, USER 65532), named as `ko resolve --local --preserve-import-paths`
#              names them: ko.local/knative.dev/serving/cmd/NAME:KNATIVE_SERVING_VERSION. The
#              release pins gcr.io images by digest, which a rebuild cannot match; the e2e's
#              serving-core (tests/e2e/controllers.py: knative_serving_core) is rendered from the
#              release's config/core with these names, as Knative's own `ko apply` does (ko.local
#              is in Knative's default registries-skipping-tag-resolving)
#   traefik    Traefik (hack/tools/traefik.sh) at /usr/local/bin/traefik, USER 65532, under the
#              name base/platform/traefik renders with
#   argocd     quay.io/argoproj/argocd:ARGOCD_VERSION   Argo CD's one binary (hack/tools/argocd.sh)
#              as upstream's Dockerfile lays it out, on Debian bookworm minbase (upstream:
#              Ubuntu) with its packages (git, tini, gpg, gpg-agent, tzdata, openssh-client,
#              ca-certificates; not connect-proxy): /usr/local/bin/argocd and the component
#              names as links to it, the module's hack/gpg-wrapper.sh, git-verify-wrapper.sh and
#              entrypoint.sh, kustomize (hack/tools/kustomize.sh), /app/config, user argocd
#              999, ENTRYPOINT tini. Not in it: helm and git-lfs (no Application here uses them)
#   redis      localhost/fmnist-e2e/redis:bookworm   Debian bookworm's redis-server (7.0; the
#              install runs Redis 8.2.3, whose image cannot be pulled here), ENTRYPOINT
#              redis-server, USER 999; tests/e2e/argocd-layer maps the install's name to it
#
# Usage:
#   scripts/e2e-images.sh [IMAGE...]   build what is missing from the cache (default: every
#                                      image above, in that order)
#   scripts/e2e-images.sh --archives   print each image's archive (docker-archive tar), in
#                                      order; exit 1 if one is not built
#   scripts/e2e-images.sh --list       print "IMAGE REFERENCE ARCHIVE STATE"
#   scripts/e2e-images.sh --names      print every image's name (E2E_SKIP_TIERS or not)
# Cache: ${FMNIST_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fashion-mnist-gitops/images}/
#        <image>-<first 12 hex of the key>.tar; the key hashes the image's recipe function,
#        its reference and its inputs (for ml: the base's key and the build context). A new
#        archive replaces the older ones of its image but FMNIST_IMAGES_KEEP (default 1).
#        Needs root, buildah and debootstrap (apt; .ci/run installs them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "$ROOT/scripts/lib.sh"
CACHE="${FMNIST_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fashion-mnist-gitops/images}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_REF=localhost/fmnist-python-base:3.11-bookworm
# Argo CD's Redis, from Debian (tests/e2e/argocd-layer names it: keep them one)
REDIS_REF=localhost/fmnist-e2e/redis:bookworm
IMAGES=(pause python ml ml_torch ml_next argoexec agent busybox event_display training_operator
  workflow_controller argocli cert_manager_controller cert_manager_webhook cert_manager_cainjector
  kserve_controller kserve_llmisvc kserve_localmodel kube_rbac_proxy
  knative_controller knative_webhook knative_activator knative_autoscaler knative_queue traefik
  argocd redis)
ALL_IMAGES=("${IMAGES[@]}")
# the e2e tiers that E2E_SKIP_TIERS skips (scripts/e2e-tiers.sh): their images are left out of
# the default build, --archives and --list (the real node imports none of them)
if [[ -n "${E2E_SKIP_TIERS:-}" && "${1:-}" != --names ]]; then
  mapfile -t IMAGES < <("$ROOT/scripts/e2e-tiers.sh" images) && [[ ${#IMAGES[@]} -gt 0 ]] \
    || die "E2E_SKIP_TIERS='$E2E_SKIP_TIERS': no image list (scripts/e2e-tiers.sh images)"
fi
# how many older archives of an image a new one leaves (a whole number: bash arithmetic would
# read any other text as 0 and delete them all)
KEEP="${FMNIST_IMAGES_KEEP:-1}"
[[ "$KEEP" =~ ^[0-9]+$ ]] || die "FMNIST_IMAGES_KEEP must be a whole number of archives, got '$KEEP'"
BUILD_TMP=""
trap 'if [[ -n "$BUILD_TMP" ]]; then rm -rf "$BUILD_TMP"; fi' EXIT

k8s_module_dir() {
  go mod download -json "k8s.io/kubernetes@v${KUBERNETES_VERSION#v}" \
    | "${PYTHON}" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

ref_of() { # IMAGE -> the reference pods ask for (what the kubelet's CRI call names)
  case "$1" in
    pause) echo "registry.k8s.io/pause:$PAUSE_VERSION" ;;
    python) echo "$BASE_REF" ;;
    ml) canonical_image "$(overlay_param local-k3d image)" ;;
    ml_torch) echo "$(ref_of ml)-torch" ;;
    ml_next) echo "localhost/fmnist-e2e/ml-next:marker" ;;
    # the name the workflow-controller gives its executor (Argo's config.go: quay.io/argoproj/
    # argoexec:<its version>; neither the manifests nor the e2e set executor.image)
    argoexec) echo "quay.io/argoproj/argoexec:$ARGO_WORKFLOWS_E2E_VERSION" ;;
    # KServe's install manifest, ConfigMap inferenceservice-config: agent.image, logger.image
    agent) echo "docker.io/kserve/agent:$(pinned_version KSERVE_VERSION)" ;;
    # training-operator's PyTorchInitContainerImageDefault (pkg/config/config.go), which
    # neither the manifests nor the e2e override
    busybox) echo "docker.io/library/alpine:3.10" ;;
    event_display) echo "localhost/fmnist-e2e/event-display:$EVENT_DISPLAY_VERSION" ;;
    training_operator) platform_image training-operator training-operator training-operator ;;
    workflow_controller) platform_image argo-workflows workflow-controller workflow-controller ;;
    argocli) platform_image argo-workflows argo-server argo-server ;;
    cert_manager_controller) platform_image cert-manager cert-manager cert-manager-controller ;;
    cert_manager_webhook) platform_image cert-manager cert-manager-webhook cert-manager-webhook ;;
    cert_manager_cainjector)
      platform_image cert-manager cert-manager-cainjector cert-manager-cainjector ;;
    kserve_controller) platform_image kserve kserve-controller-manager manager ;;
    kserve_llmisvc) platform_image kserve llmisvc-controller-manager manager ;;
    kserve_localmodel) platform_image kserve kserve-localmodel-controller-manager manager ;;
    kube_rbac_proxy) local r
      r="$(platform_image kserve kserve-controller-manager kube-rbac-proxy)" || return 1
      [[ "$r" == *":$KUBE_RBAC_PROXY_VERSION" ]] \
        || die "KServe's install runs $r, versions.env builds KUBE_RBAC_PROXY_VERSION=$KUBE_RBAC_PROXY_VERSION: make them one"
      echo "$r" ;;
    knative_*) echo "ko.local/knative.dev/serving/cmd/${1#knative_}:$KNATIVE_SERVING_VERSION" ;;
    traefik) platform_image traefik traefik traefik ;;
    argocd) local v
      v="$(pinned_version ARGOCD_VERSION)" || return 1
      echo "quay.io/argoproj/argocd:$v" ;;
    redis) echo "$REDIS_REF" ;;
  esac
}

bin_digest() { # BINARY (scripts/tools.sh --bin) -> its sha256, or a line saying it is not built
  local bin
  if bin="$("$ROOT/scripts/tools.sh" --bin "$1" 2>/dev/null)"; then sha256sum < "$bin"; else echo "$1: not built"; fi
}

inputs_of() { # IMAGE -> what its key hashes besides its recipe and reference
  case "$1" in
    pause) cat "$(k8s_module_dir)/build/pause/linux/pause.c" ;;
    python) echo "$DEBIAN_MIRROR bookworm" ;;
    argoexec) bin_digest argoexec ;;
    agent) bin_digest kserve-agent ;;
    busybox) if [[ -f /bin/busybox ]]; then sha256sum < /bin/busybox; else echo "busybox: not installed"; fi ;;
    training_operator) bin_digest training-operator ;;
    workflow_controller) bin_digest workflow-controller ;;
    argocli) bin_digest argo ;;
    cert_manager_*) bin_digest "cert-manager-${1#cert_manager_}" ;;
    kserve_controller) bin_digest kserve-manager ;;
    kserve_llmisvc) bin_digest kserve-llmisvc ;;
    kserve_localmodel) bin_digest kserve-localmodel ;;
    kube_rbac_proxy) bin_digest kube-rbac-proxy ;;
    event_display) bin_digest event_display ;;
    knative_*) bin_digest "knative-${1#knative_}" ;;
    traefik) bin_digest traefik ;;
    argocd) echo "$DEBIAN_MIRROR bookworm"; bin_digest argocd; bin_digest kustomize ;;
    redis) echo "$DEBIAN_MIRROR bookworm" ;;
    ml|ml_torch) # the base it is built on, and what .dockerignore lets into the build context
      archive_of python
      image_context ;;
    ml_next) archive_of ml; cat "$ROOT/hack/e2e/src-marker.txt" ;;
  esac
}

# The recipes' shared helpers, in the order they call each other (a helper after its callers):
# each image's key hashes its recipe and every helper that recipe reaches.
HELPERS=(build_project ko_like kserve_manager scratch_image tool_bin debian_image)
recipe_of() { # IMAGE -> the source of its recipe function and of the helpers it calls
  local text helper
  text="$(declare -f "build_$1")"
  for helper in "${HELPERS[@]}"; do
    if [[ "$text" == *"$helper "* ]]; then text+=$'\n'"$(declare -f "$helper")"; fi
  done
  printf '%s\n' "$text"
}

archive_of() { # IMAGE [REF] -> its cache path; the key: its recipe, reference and inputs
  local key ref="${2:-}"
  # a reference that cannot be had (ref_of died) stops here, not in a key of an empty name
  [[ -n "$ref" ]] || ref="$(ref_of "$1")" || return 1
  key="$({ recipe_of "$1"; echo "$ref"; inputs_of "$1"; } | sha256sum | cut -c1-12)"
  echo "$CACHE/$1-$key.tar"
}

# --- recipes: each builds image $1 as buildah image $2 ------------------------------------------

build_pause() {
  local dir c
  dir="$(mktemp -d)"
  gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-0" \
    -o "$dir/pause" "$(k8s_module_dir)/build/pause/linux/pause.c"
  c="$(buildah from scratch)"
  buildah copy "$c" "$dir/pause" /pause >/dev/null
  buildah config --user 65535:65535 --entrypoint '["/pause"]' "$c"
  buildah commit --rm "$c" "$2" >/dev/null
  rm -rf "$dir"
}

# A container $1 with Debian bookworm minbase and PACKAGES (comma-separated) debootstrapped into
# it, apt's lists and caches removed; mounted at $2 (the caller unmounts and commits).
debian_image() { # C MOUNT PACKAGES
  debootstrap --variant=minbase --include="$3" bookworm "$2" "$DEBIAN_MIRROR" \
    > "$BUILD_TMP/debootstrap.log" 2>&1 || {
    tail -20 "$BUILD_TMP/debootstrap.log" >&2
    buildah umount "$1" >/dev/null; buildah rm "$1" >/dev/null; return 1
  }
  rm -rf "$2"/var/lib/apt/lists/* "$2"/var/cache/apt/*.bin "$2"/var/log/*
}

# (not through debian_image: that would change this recipe's text, its key, and with it the
# key of ml and ml_torch, built on it)
build_python() {
  local c m
  c="$(buildah from scratch)"
  m="$(buildah mount "$c")"
  debootstrap --variant=minbase --include=python3,python3-pip,python-is-python3,ca-certificates \
    bookworm "$m" "$DEBIAN_MIRROR" > "$BUILD_TMP/debootstrap.log" 2>&1 || {
    tail -20 "$BUILD_TMP/debootstrap.log" >&2
    buildah umount "$c" >/dev/null; buildah rm "$c" >/dev/null; return 1
  }
  # like python:slim, pip installs into the system's Python (PEP 668 marker removed)
  rm -f "$m/usr/lib/python3.11/EXTERNALLY-MANAGED"
  rm -rf "$m"/var/lib/apt/lists/* "$m"/var/cache/apt/*.bin "$m"/var/log/*
  buildah umount "$c" >/dev/null
  buildah config --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
  buildah commit --rm "$c" "$2" >/dev/null
}

build_project() { # REF EXTRAS: the repo's Dockerfile on the Python base, pyproject's EXTRAS
  local runc
  runc="$("$ROOT/scripts/tools.sh" --bin runc)" || die "build runc first: scripts/tools.sh runc"
  [[ -f "$(archive_of python)" ]] || die "build the base first: scripts/e2e-images.sh python ml"
  # FROM the base this key names: its archive, loaded into buildah's store under its tag
  buildah pull --quiet "docker-archive:$(archive_of python)" >/dev/null
  # pip reaches PyPI through this machine's CA bundle: mounted for the build only, nothing of
  # it is in the image
  buildah bud --runtime "$runc" --pull=never --layers --network host \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --build-arg "PYTHON_BASE_IMAGE=$BASE_REF" --build-arg "EXTRAS=$2" -t "$1" "$ROOT" \
    > "$BUILD_TMP/build.log" 2>&1 || { tail -30 "$BUILD_TMP/build.log" >&2; return 1; }
}

build_ml() { build_project "$2" ""; }
build_ml_torch() { build_project "$2" torch; }
build_ml_next() { # ml, and the marker where the Dockerfile's COPY src ./src puts it
  local c
  [[ -f "$(archive_of ml)" ]] || die "build ml first: scripts/e2e-images.sh ml ml_next"
  buildah pull --quiet "docker-archive:$(archive_of ml)" >/dev/null
  c="$(buildah from --pull=never "$(ref_of ml)")"
  buildah copy --chown 0:0 --chmod 0644 "$c" "$ROOT/hack/e2e/src-marker.txt" \
    /opt/app/src/e2e-marker.txt >/dev/null
  buildah commit --rm "$c" "$2" >/dev/null
}

# One static binary FROM scratch: SRC at DEST (0755), LINKS (names, space-separated) as
# symlinks to it beside DEST, /tmp 1777, then `buildah config` CONFIG_ARGS.
scratch_image() { # REF SRC DEST LINKS CONFIG_ARG...
  local ref="$1" src="$2" dest="$3" links="$4" c m name
  shift 4
  c="$(buildah from scratch)"
  m="$(buildah mount "$c")"
  install -D -m 0755 "$src" "$m$dest"
  for name in $links; do ln -s "${dest##*/}" "$m${dest%/*}/$name"; done
  mkdir -m 1777 "$m/tmp"
  buildah umount "$c" >/dev/null
  buildah config "$@" "$c"
  buildah commit --rm "$c" "$ref" >/dev/null
}

build_argoexec() {
  local bin
  bin="$("$ROOT/scripts/tools.sh" --bin argoexec)" || die "build it first: scripts/tools.sh argo"
  scratch_image "$2" "$bin" /bin/argoexec "" --env PATH=/usr/local/bin:/usr/bin:/bin \
    --user 8737 --entrypoint '["argoexec"]'
}

# A Go program alone, like ko's images (distroless static:nonroot): /ko-app/NAME, USER 65532.
ko_like() { # REF TOOL_BINARY NAME
  local bin
  bin="$("$ROOT/scripts/tools.sh" --bin "$2")" || die "build it first: scripts/tools.sh (--list names its recipe)"
  scratch_image "$1" "$bin" "/ko-app/$3" "" --user 65532:65532 --entrypoint "[\"/ko-app/$3\"]"
}

build_agent() { ko_like "$2" kserve-agent agent; }

build_busybox() {
  [[ -x /bin/busybox ]] || die "install Debian's busybox-static first (apt-get install busybox-static)"
  scratch_image "$2" /bin/busybox /bin/busybox "sh sed seq sleep nslookup" \
    --env PATH=/bin --user 65534:65534 --cmd '["sh"]'
}
build_event_display() { ko_like "$2" event_display event_display; }

tool_bin() { # NAME -> scripts/tools.sh --bin NAME, or die naming the build
  "$ROOT/scripts/tools.sh" --bin "$1" || die "build it first: scripts/tools.sh (--list names its recipe)"
}
build_training_operator() {
  scratch_image "$2" "$(tool_bin training-operator)" /manager "" --entrypoint '["/manager"]'
}
build_workflow_controller() {
  scratch_image "$2" "$(tool_bin workflow-controller)" /bin/workflow-controller "" \
    --env PATH=/usr/local/bin:/usr/bin:/bin --user 8737 --entrypoint '["workflow-controller"]'
}
build_argocli() {
  scratch_image "$2" "$(tool_bin argo)" /bin/argo "" --env PATH=/usr/local/bin:/usr/bin:/bin \
    --user 8737 --workingdir /home/argo --entrypoint '["argo"]'
}
build_cert_manager_controller() { ko_like "$2" cert-manager-controller controller; }
build_cert_manager_webhook() { ko_like "$2" cert-manager-webhook webhook; }
build_cert_manager_cainjector() { ko_like "$2" cert-manager-cainjector cainjector; }
kserve_manager() { # REF TOOL_BINARY: upstream's Dockerfiles' last stage (distroless nonroot)
  scratch_image "$1" "$(tool_bin "$2")" /manager "" --user 65532:65532 --entrypoint '["/manager"]'
}
build_kserve_controller() { kserve_manager "$2" kserve-manager; }
build_kserve_llmisvc() { kserve_manager "$2" kserve-llmisvc; }
build_kserve_localmodel() { kserve_manager "$2" kserve-localmodel; }
build_kube_rbac_proxy() {
  scratch_image "$2" "$(tool_bin kube-rbac-proxy)" /usr/local/bin/kube-rbac-proxy "" \
    --user 65532:65532 --entrypoint '["/usr/local/bin/kube-rbac-proxy"]'
}
build_knative_controller() { ko_like "$2" knative-controller controller; }
build_knative_webhook() { ko_like "$2" knative-webhook webhook; }
build_knative_activator() { ko_like "$2" knative-activator activator; }
build_knative_autoscaler() { ko_like "$2" knative-autoscaler autoscaler; }
build_knative_queue() { ko_like "$2" knative-queue queue; }
build_traefik() {
  scratch_image "$2" "$(tool_bin traefik)" /usr/local/bin/traefik "" --user 65532:65532 \
    --entrypoint '["/usr/local/bin/traefik"]'
}

build_argocd() { # upstream's Dockerfile (argocd-base + final stage) on Debian bookworm minbase
  local c m name mod
  mod="$(go mod download -json "github.com/argoproj/argo-cd/v3@$(pinned_version ARGOCD_VERSION)" \
    | "${PYTHON}" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  c="$(buildah from scratch)"
  m="$(buildah mount "$c")"
  debian_image "$c" "$m" git,tini,ca-certificates,gpg,gpg-agent,tzdata,openssh-client
  # upstream: groupadd -g 999 argocd && useradd -r -u 999 -g argocd argocd, HOME group-writable
  echo 'argocd:x:999:' >> "$m/etc/group"
  echo 'argocd:x:999:999::/home/argocd:/bin/sh' >> "$m/etc/passwd"
  install -d -o 999 -g 0 -m 0775 "$m/home/argocd"
  install -m 0755 "$mod/hack/gpg-wrapper.sh" "$mod/hack/git-verify-wrapper.sh" \
    "$mod/entrypoint.sh" "$m/usr/local/bin/"
  ln -s entrypoint.sh "$m/usr/local/bin/uid_entrypoint.sh"
  install -m 0755 "$(tool_bin kustomize)" "$m/usr/local/bin/kustomize"
  install -d "$m/app/config/ssh" "$m/app/config/tls" "$m/app/config/gpg/source"
  install -d -o 999 -m 0700 "$m/app/config/gpg/keys"
  touch "$m/app/config/ssh/ssh_known_hosts"
  ln -sf /app/config/ssh/ssh_known_hosts "$m/etc/ssh/ssh_known_hosts"
  install -m 0755 "$(tool_bin argocd)" "$m/usr/local/bin/argocd"
  for name in argocd-server argocd-repo-server argocd-cmp-server argocd-application-controller \
    argocd-dex argocd-notifications argocd-applicationset-controller argocd-k8s-auth \
    argocd-commit-server; do
    ln -s argocd "$m/usr/local/bin/$name"
  done
  buildah umount "$c" >/dev/null
  buildah config --env USER=argocd --env GRPC_ENABLE_TXT_SERVICE_CONFIG=false --user 999 \
    --workingdir /home/argocd --entrypoint '["/usr/bin/tini", "--"]' "$c"
  buildah commit --rm "$c" "$2" >/dev/null
}
build_redis() {
  local c m
  c="$(buildah from scratch)"
  m="$(buildah mount "$c")"
  debian_image "$c" "$m" redis-server
  buildah umount "$c" >/dev/null
  buildah config --user 999 --workingdir /tmp --entrypoint '["redis-server"]' "$c"
  buildah commit --rm "$c" "$2" >/dev/null
}

build() {
  local image="$1" archive ref t0
  archive="$(archive_of "$image")"
  ref="$(ref_of "$image")"
  if [[ -f "$archive" ]]; then log "$image: cached ($archive)"; return 0; fi
  need buildah
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock-$image"
  flock 8
  if [[ -f "$archive" ]]; then log "$image: built by a concurrent run"; return 0; fi
  # a build killed with SIGKILL left its directory (the lock says no run is using it)
  find "$CACHE" -maxdepth 1 -name ".tmp-$image-*" -exec rm -rf {} +
  BUILD_TMP="$(mktemp -d "$CACHE/.tmp-$image-XXXXXX")"
  t0="$(date +%s)"
  log "$image: building $ref ($(df -h --output=avail "$CACHE" | tail -1 | tr -d ' ') free)"
  # buildah's big temporary files (a layer's diff while it commits, the archive's copies: up to
  # about twice the largest layer) go where TMPDIR says, by default /var/tmp: here, in this
  # build's directory, removed when the build fails or is stopped (EXIT trap); after a SIGKILL
  # the image's next build removes it (the stale .tmp-<image>-* above)
  TMPDIR="$BUILD_TMP" "build_$image" "$image" "$ref"
  TMPDIR="$BUILD_TMP" buildah push --quiet "$ref" "docker-archive:$BUILD_TMP/image.tar:$ref" >/dev/null
  mv "$BUILD_TMP/image.tar" "$archive"
  # older archives of this image: keep the newest FMNIST_IMAGES_KEEP (default 1: a second clone
  # at another commit finds its own; .ci/run keeps none: CI's disk)
  find "$CACHE" -maxdepth 1 -name "$image-*.tar" ! -path "$archive" -printf '%T@ %p\n' \
    | sort -rn | tail -n "+$((KEEP + 1))" | cut -d' ' -f2- | xargs -r rm -f
  rm -rf "$BUILD_TMP"
  BUILD_TMP=""
  log "$image: built in $(($(date +%s) - t0)) s, $(du -h "$archive" | cut -f1) -> $archive"
}

case "${1:-}" in
  "") for i in "${IMAGES[@]}"; do build "$i"; done ;;
  [a-z]*)
    for i in "$@"; do
      [[ " ${ALL_IMAGES[*]} " == *" $i "* ]] || die "no image named '$i' (have: ${ALL_IMAGES[*]})"
    done
    for i in "$@"; do build "$i"; done ;;
  --names) printf '%s\n' "${ALL_IMAGES[@]}" ;;
  --archives)
    for i in "${IMAGES[@]}"; do
      a="$(archive_of "$i")" || exit 1
      [[ -f "$a" ]] || die "image $i is not built: run scripts/e2e-images.sh"
      echo "$a"
    done ;;
  --list)
    for i in "${IMAGES[@]}"; do
      r="$(ref_of "$i")" || exit 1
      a="$(archive_of "$i" "$r")" || exit 1
      echo "$i $r $a $([[ -f "$a" ]] && echo built || echo missing)"
    done ;;
  -h|--help)
    echo "usage: scripts/e2e-images.sh [IMAGE...|--archives|--list|--names]"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "usage: scripts/e2e-images.sh [IMAGE...|--archives|--list|--names] (see --help)" ;;
esac
