#!/usr/bin/env bash
# Build the pinned upstream Go programs the e2e control plane and `make validate` run
# (kube-apiserver, etcd, kwok, kubeconform, the upstream controllers), into a cache OUTSIDE
# the clone. Nothing built here is committed; versions come from versions.env, or for a remote
# base of the manifests (KSERVE_VERSION, TRAINING_OPERATOR_VERSION) from its kustomization URL
# (lib.sh: pinned_version).
#
# Usage:
#   scripts/tools.sh [TOOL...]          build the named recipes (default: every hack/tools/*.sh);
#                                       a recipe already in the cache is not rebuilt
#   scripts/tools.sh --bin-dir TOOL     print TOOL's bin directory (exit 1 if not built)
#   scripts/tools.sh --bin NAME         print the path of binary NAME (exit 1 if not built)
#   scripts/tools.sh --list             print "TOOL VERSION DIR STATE" for every recipe
#   scripts/tools.sh --check-go         exit 1 unless `go` is versions.env's GO_VERSION
#   scripts/tools.sh --download [TOOL...]
#                                       fetch the modules of each recipe not yet built into Go's
#                                       module cache, nothing else (.ci/run runs it beside the
#                                       builds: downloads wait on the proxy, builds on the CPU)
#
# Cache: ${FMNIST_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fashion-mnist-gitops/tools}/
#        <tool>-<version>-<first 10 hex of sha256(recipe file)>/bin/<binaries>
#        (the hash covers the recipes it sources, e.g. kube-node.sh sources kubernetes.sh)
# Each entry keeps build.log, build-seconds (wall), build-time ("wall user sys" seconds) and
# build-phases ("download S compile-link S": wall seconds of `go get -tool`, `go install`).
# A build runs in a temp dir beside it and is renamed into place atomically, under a flock,
# so an interrupted or concurrent build never leaves a half-filled cache entry.
#
# Recipe contract: hack/tools/<tool>.sh is a bash file SOURCED (in a subshell) by this script.
# It must set:
#   TOOL_VERSION_KEY   key in versions.env holding the version (e.g. KUBERNETES_VERSION), or a
#                      key lib.sh's pinned_version reads from a kustomization URL;
#                      a missing leading "v" is added (so 1.2.3 is required as v-prefixed) unless
#                      tool_module_version is defined.
#   TOOL_MODULE        the upstream Go module to require (e.g. k8s.io/kubernetes)
#   TOOL_PACKAGES      bash array of main packages (full import paths) to build
# It may set:
#   TOOL_BINARIES      bash array "name" or "built-name=name" per package, in order (default:
#                      the binary `go install` names after the package path). Only these
#                      names are exposed by --bin.
#   TOOL_REPLACES      bash array of extra replace directives "old[@v]=new@v" (go mod edit syntax)
#   TOOL_CGO_ENABLED   default 0 (static binaries)
#   TOOL_TAGS          comma-separated build tags
#   TOOL_SOURCE_LINKS  bash array "path=target": symlinks of upstream's repository that the Go
#                      module zip omits (module zips hold no symlinks); the module's source is
#                      then copied to ./src with these links restored and used by a replace
#   TOOL_SOURCE_FILES  bash array of paths: empty files that upstream's own build creates in
#                      its tree before compiling (e.g. Argo's Makefile without STATIC_FILES:
#                      ui/dist/app/index.html); the source is copied to ./src as above
#   TOOL_GENERATED     bash array of paths that upstream's `go generate` writes into its tree
#                      (the zip lacks them): tool_generate_source must make each one; the source
#                      is copied to ./src as above
#   TOOL_MAIN_MODULES  bash array "MODPATH=DIR": main modules that no proxy can serve (their
#                      go.mod names a path that does not match their folder, and replaces
#                      TOOL_MODULE with the tree above them: cert-manager's cmd/*), laid out by
#                      tool_main_source under ./main; each one's replace of TOOL_MODULE is
#                      dropped for TOOL_MODULE@VERSION from the proxy, and the tool module
#                      requires MODPATH@v0.0.0 replaced by ./main/DIR. A TOOL_PACKAGES entry
#                      inside one is got at v0.0.0
# and may define these functions (they see MODULE_VERSION and MODULE_TIME, the module's
# publication time from the proxy, RFC 3339):
#   tool_module_version VERSION    -> the module version to require (default: add "v")
#   tool_local_replace MODPATH DIR -> version for an upstream replace "MODPATH => ./DIR", or "-"
#                                     to drop that replace; without the function a local
#                                     replace in upstream's go.mod is an error
#   tool_main_source DEST          -> lays out upstream's tree of TOOL_MAIN_MODULES under DEST
#                                     (required with TOOL_MAIN_MODULES)
#   tool_generate_source           -> runs in the tool module after `go get -tool`, the source in
#                                     ./src: makes TOOL_GENERATED as upstream's go generate does
#   tool_ldflags                   -> extra -ldflags (e.g. -X version variables); "-s -w" is
#                                     always added
# Upstream's own go.mod is read (`go mod download -json MODULE@VERSION` -> GoMod) and its
# replace directives are carried over: non-local ones verbatim, local ones (./staging/...)
# through tool_local_replace. The tool module is then created with `go mod init`,
# `go get -tool PKG@VERSION ...` (Go `tool` directives) and built with `go install tool`.
# Checksums are verified against sum.golang.org (through the module proxy) as usual.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib.sh" # pinned_version (its die and log are redefined below)
RECIPES="$ROOT/hack/tools"
CACHE="${FMNIST_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fashion-mnist-gitops/tools}"
TIMEFORMAT='%R %U %S' # what `time` writes to build-time
# local, whatever the caller set: the pinned toolchain (check_go) builds every tool, and `go` never
# switches to another one for a module that asks for a newer Go
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"

die() { echo "tools.sh: $*" >&2; exit 1; }
BUILD_TMP=""
trap 'if [[ -n "$BUILD_TMP" ]]; then rm -rf "$BUILD_TMP"; fi' EXIT
log() { echo "tools.sh: $*" >&2; }

versions_get() { # KEY -> value from versions.env, else from the remote base that pins it
  local v
  v="$(sed -n "s/^$1=//p" "$ROOT/versions.env" | tail -n1)"
  if [[ -z "$v" ]]; then v="$(pinned_version "$1")" || exit 1; fi
  printf '%s\n' "$v"
}

# Print "VERSION DIR" of a recipe (sourcing it in a subshell keeps recipes isolated).
recipe_entry() {
  local tool="$1" file="$RECIPES/$1.sh"
  [[ "$tool" =~ ^[a-z0-9][a-z0-9-]*$ && -f "$file" ]] \
    || die "no recipe named '$tool' (have: $(recipe_names | tr '\n' ' '))"
  (
    # shellcheck disable=SC1090
    source "$file"
    [[ -n "${TOOL_VERSION_KEY:-}" ]] || die "$file: TOOL_VERSION_KEY unset"
    local raw ver hash
    raw="$(versions_get "$TOOL_VERSION_KEY")"
    if declare -F tool_module_version >/dev/null; then ver="$(tool_module_version "$raw")"
    else ver="v${raw#v}"; fi
    hash="$(recipe_hash "$file")"
    printf '%s %s\n' "$ver" "$CACHE/$tool-$ver-$hash"
  )
}

# sha256 of a recipe and of the recipes it sources (`source "$(dirname ...)/NAME.sh"`), so an
# edit of an included recipe rebuilds the one that includes it.
recipe_hash() { # FILE -> first 10 hex digits
  local file="$1" inc
  {
    cat "$file"
    for inc in $(sed -n 's|^source .*/\([a-z0-9-]*\.sh\)"\{0,1\}$|\1|p' "$file"); do
      cat "$RECIPES/$inc"
    done
  } | sha256sum | cut -c1-10
}

recipe_names() { local f; for f in "$RECIPES"/*.sh; do basename "$f" .sh; done; }

# Binary names a recipe exposes (one per line).
recipe_binaries() {
  (
    # shellcheck disable=SC1090
    source "$RECIPES/$1.sh"
    local i b
    for i in "${!TOOL_PACKAGES[@]}"; do
      b="${TOOL_BINARIES[$i]:-}"
      if [[ -z "$b" ]]; then b="$(default_binary_name "${TOOL_PACKAGES[$i]}")"; fi
      echo "${b##*=}"
    done
  )
}

default_binary_name() { # what `go install` calls the binary of package $1
  local p="$1" last
  last="${p##*/}"
  if [[ "$last" =~ ^v[0-9]+$ && "$p" == */* ]]; then p="${p%/*}"; last="${p##*/}"; fi
  echo "$last"
}

# Emit "-replace=old=new" flags for upstream's go.mod replace directives.
upstream_replace_flags() { # GOMOD_FILE
  go mod edit -json "$1" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    old = r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else "")
    new = r["New"]
    if new.get("Version"):
        print("remote", old, new["Path"] + "@" + new["Version"])
    else:
        print("local", old, new["Path"])
'
}

# The toolchain must be versions.env's GO_VERSION (go1.26 or go1.26.N). Checked before a build
# only: a cached tool needs no Go (its entry's go-version file names the Go that built it).
# Sets GO_FOUND (its GOVERSION) once per run; [TOOL] names what needs Go in the message.
GO_FOUND=""
check_go() {
  [[ -z "$GO_FOUND" ]] || return 0
  local want have go
  go="$(command -v go)" || die "Go is required${1:+ to build $1} (go.dev/dl); not found on PATH"
  want="$(versions_get GO_VERSION)"
  have="$(go env GOVERSION)" || die "go env GOVERSION failed ($go)"
  [[ "$have" == "go$want" || "$have" == "go$want".* ]] \
    || die "Go $want is pinned (versions.env GO_VERSION); $go is ${have:-(no version)}"
  GO_FOUND="$have"
}

# In a fresh directory (the cwd), with a recipe sourced and MODULE_VERSION set: the tool module,
# its upstream's replaces carried over, resolved and downloaded (`go get -tool`; Go's module
# cache is shared and locked, so two of these may run at once). Sets T_GET, MODULE_TIME.
resolve_module() {
  export CGO_ENABLED="${TOOL_CGO_ENABLED:-0}"
  local info gomod
  info="$(go mod download -json "$TOOL_MODULE@$MODULE_VERSION")"
  gomod="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' <<<"$info")"
  MODULE_TIME="$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.load(open(d["Info"]))["Time"])' <<<"$info")"
  export MODULE_VERSION MODULE_TIME
  go mod init "fmnist-tools/$tool" >/dev/null 2>&1
  local -a flags=()
  local kind old new r
  while read -r kind old new; do
    if [[ "$kind" == remote ]]; then
      flags+=("-replace=$old=$new")
    else
      declare -F tool_local_replace >/dev/null \
        || die "$tool: upstream replaces $old => $new (local) and the recipe has no tool_local_replace"
      r="$(tool_local_replace "${old%@*}" "$new")"
      if [[ "$r" != "-" ]]; then flags+=("-replace=$old=${old%@*}@$r"); fi
    fi
  done < <(upstream_replace_flags "$gomod")
  for r in "${TOOL_REPLACES[@]+"${TOOL_REPLACES[@]}"}"; do flags+=("-replace=$r"); done
  if [[ -n "${TOOL_SOURCE_LINKS[*]:-}${TOOL_SOURCE_FILES[*]:-}${TOOL_GENERATED[*]:-}" ]]; then
    local moddir link file
    moddir="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' <<<"$info")"
    cp -r "$moddir" src && chmod -R u+w src
    for link in "${TOOL_SOURCE_LINKS[@]+"${TOOL_SOURCE_LINKS[@]}"}"; do
      ln -s "${link#*=}" "src/${link%%=*}"
    done
    for file in "${TOOL_SOURCE_FILES[@]+"${TOOL_SOURCE_FILES[@]}"}"; do
      mkdir -p "src/$(dirname "$file")" && touch "src/$file"
    done
    flags+=("-replace=$TOOL_MODULE=./src")
  fi
  local main mpath mdir
  for main in "${TOOL_MAIN_MODULES[@]+"${TOOL_MAIN_MODULES[@]}"}"; do
    if [[ ! -d main ]]; then
      declare -F tool_main_source >/dev/null \
        || die "$tool: TOOL_MAIN_MODULES is set and the recipe has no tool_main_source"
      mkdir main
      tool_main_source "$PWD/main" || die "$tool: tool_main_source failed"
      chmod -R u+w main
    fi
    mpath="${main%%=*}" mdir="main/${main#*=}"
    [[ -f "$mdir/go.mod" ]] || die "$tool: tool_main_source made no $mdir/go.mod"
    [[ "$(go mod edit -json "$mdir/go.mod" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Module"]["Path"])')" == "$mpath" ]] \
      || die "$tool: $mdir/go.mod is not module $mpath"
    (cd "$mdir" && go mod edit -dropreplace="$TOOL_MODULE" -require="$TOOL_MODULE@$MODULE_VERSION")
    flags+=("-require=$mpath@v0.0.0" "-replace=$mpath=./$mdir")
  done
  if ((${#flags[@]})); then go mod edit "${flags[@]}"; fi
  local -a pkgs=()
  local p v
  for p in "${TOOL_PACKAGES[@]}"; do
    v="$MODULE_VERSION"
    for main in "${TOOL_MAIN_MODULES[@]+"${TOOL_MAIN_MODULES[@]}"}"; do
      if [[ "$p" == "${main%%=*}" || "$p" == "${main%%=*}/"* ]]; then v=v0.0.0; fi
    done
    pkgs+=("$p@$v")
  done
  T_GET="$(date +%s)" # the start of the download phase (build-phases)
  go get -tool "${pkgs[@]}"
}

build_recipe() {
  local tool="$1" file="$RECIPES/$1.sh" entry ver dir
  entry="$(recipe_entry "$tool")"
  read -r ver dir <<<"$entry"
  if [[ -f "$dir/bin/.complete" ]]; then
    log "$tool $ver: cached in $dir (nothing rebuilt)"
    return 0
  fi
  check_go "$tool"
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock-$tool"
  flock 9
  if [[ -f "$dir/bin/.complete" ]]; then
    log "$tool $ver: built by a concurrent run in $dir"; return 0
  fi
  local tmp
  tmp="$(mktemp -d "$CACHE/.tmp-$tool-XXXXXX")"
  chmod 755 "$tmp"
  BUILD_TMP="$tmp" # removed on exit (failure, Ctrl-C) unless renamed into place
  log "$tool $ver: building in $tmp (log: $dir/build.log once done)"
  local t0
  t0="$(date +%s)"
  local rc
  set +e
  { time { (
    set -euo pipefail
    # shellcheck disable=SC1090
    source "$file"
    cd "$tmp"
    MODULE_VERSION="$ver"
    resolve_module
    if [[ -n "${TOOL_GENERATED[*]:-}" ]]; then
      declare -F tool_generate_source >/dev/null \
        || die "$tool: TOOL_GENERATED is set and the recipe has no tool_generate_source"
      tool_generate_source
      for file in "${TOOL_GENERATED[@]}"; do
        [[ -s "src/$file" && ! -L "src/$file" ]] \
          || die "$tool: tool_generate_source did not make src/$file (a regular, non-empty file)"
      done
    fi
    local ld="-s -w"
    if declare -F tool_ldflags >/dev/null; then ld="$ld $(tool_ldflags)"; fi
    mkdir -p bin
    local t2
    t2="$(date +%s)"
    GOBIN="$tmp/bin" go install -trimpath ${TOOL_TAGS:+-tags "$TOOL_TAGS"} -ldflags "$ld" tool
    # wall seconds of the phases: resolving and downloading the module graph (`go get`), then
    # compiling and linking (`go install`); what came before (upstream's go.mod, the source copy)
    # is the rest of build-seconds
    echo "download $((t2 - T_GET)) compile-link $(($(date +%s) - t2))" > "$tmp/build-phases"
    local i b
    for i in "${!TOOL_PACKAGES[@]}"; do
      b="${TOOL_BINARIES[$i]:-}"
      if [[ "$b" == *=* ]]; then mv "bin/${b%%=*}" "bin/${b##*=}"; fi
      b="${b##*=}"
      [[ -n "$b" ]] || b="$(default_binary_name "${TOOL_PACKAGES[$i]}")"
      [[ -x "bin/$b" ]] || die "$tool: expected binary bin/$b was not built"
    done
  ) > "$tmp/build.log" 2>&1; }; } 2> "$tmp/build-time"
  rc=$?
  set -e
  if ((rc != 0)); then
    tail -n 30 "$tmp/build.log" >&2
    cp "$tmp/build.log" "$CACHE/$tool-$ver.failed.log"
    die "$tool $ver: build failed (exit $rc; log: $CACHE/$tool-$ver.failed.log)"
  fi
  local secs=$(( $(date +%s) - t0 )) user sys
  echo "$secs" > "$tmp/build-seconds"
  echo "$GO_FOUND" > "$tmp/go-version"
  read -r _ user sys < "$tmp/build-time" || true
  touch "$tmp/bin/.complete"
  rm -rf "$dir"
  mv -T "$tmp" "$dir"
  BUILD_TMP=""
  log "$tool $ver: built in ${secs}s (CPU: ${user:-?}s user + ${sys:-?}s sys; wall: $(cat "$dir/build-phases" 2>/dev/null)) -> $dir/bin ($(cd "$dir/bin" && ls | tr '\n' ' '))"
}

# --download: a recipe's modules fetched into Go's module cache ahead of its build (resolve_module
# in a throwaway directory; no cache entry is made). The build after it downloads nothing; a
# download that fails is only logged: the build repeats it and fails there, saying why.
download_recipe() {
  local tool="$1" file="$RECIPES/$1.sh" entry ver dir tmp t0
  entry="$(recipe_entry "$tool")"
  read -r ver dir <<<"$entry"
  if [[ -f "$dir/bin/.complete" ]]; then return 0; fi
  check_go "$tool"
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/tools-download-$tool-XXXXXX")"
  BUILD_TMP="$tmp"
  t0="$(date +%s)"
  local rc
  set +e # (not `if ( ... )`: errexit would be off inside the subshell too)
  (
    set -euo pipefail
    # shellcheck disable=SC1090
    source "$file"
    cd "$tmp"
    MODULE_VERSION="$ver"
    resolve_module
  ) > "$tmp.log" 2>&1
  rc=$?
  set -e
  if ((rc == 0)); then
    log "$tool $ver: modules downloaded in $(($(date +%s) - t0))s"
  else
    log "$tool $ver: download failed (its build will say why): $(tail -n 3 "$tmp.log" | tr '\n' ' ')"
  fi
  rm -rf "$tmp" "$tmp.log"
  BUILD_TMP=""
}

bin_dir() {
  local entry ver dir
  entry="$(recipe_entry "$1")"
  read -r ver dir <<<"$entry"
  [[ -f "$dir/bin/.complete" ]] || die "$1 $ver is not built; run scripts/tools.sh $1"
  echo "$dir/bin"
}

case "${1:-}" in
  --bin-dir|--print-bin-dir)
    [[ $# -eq 2 ]] || die "usage: $0 --bin-dir TOOL"
    bin_dir "$2" ;;
  --bin)
    [[ $# -eq 2 ]] || die "usage: $0 --bin NAME"
    for t in $(recipe_names); do
      # grep without -q reads all lines: an early exit would SIGPIPE the writer (pipefail)
      if recipe_binaries "$t" | grep -Fx -- "$2" >/dev/null; then
        d="$(bin_dir "$t")" || exit 1 # not built: the error, and nothing on stdout
        echo "$d/$2"
        exit 0
      fi
    done
    die "no recipe in hack/tools builds a binary named $2" ;;
  --list)
    for t in $(recipe_names); do
      entry="$(recipe_entry "$t")"
      read -r ver dir <<<"$entry"
      state=missing; [[ -f "$dir/bin/.complete" ]] && state=built
      echo "$t $ver $dir $state"
    done ;;
  --download)
    shift
    if [[ $# -eq 0 ]]; then mapfile -t tools < <(recipe_names); else tools=("$@"); fi
    for t in "${tools[@]}"; do download_recipe "$t"; done ;;
  --check-go)
    check_go
    log "$(command -v go): $GO_FOUND, as pinned" ;;
  -h|--help)
    echo "usage: scripts/tools.sh [TOOL...] | --bin NAME | --bin-dir TOOL | --list | --check-go | --download [TOOL...]"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  -*) die "unknown option $1 (see --help)" ;;
  *)
    if [[ $# -eq 0 ]]; then mapfile -t tools < <(recipe_names); else tools=("$@"); fi
    for t in "${tools[@]}"; do build_recipe "$t"; done ;;
esac
