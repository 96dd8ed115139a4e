#!/usr/bin/env bash
# Build the envtest control plane (kube-apiserver + etcd) from the Go module
# proxy and print the directory that holds them, for KUBEBUILDER_ASSETS:
#
#   export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)
#
# Why build instead of download: the only network the CI and developer
# machines are guaranteed to have is the Go module proxy, and building from
# it pins the exact source by go.sum. The build is slow (kube-apiserver: 4-15
# minutes and ~2.4 GB of module and build cache on 2 cores), so the result is
# cached by version under
#   ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/envtest/k8s-<k8s>-etcd-<etcd>/
# A complete cache entry is reused without running go at all. Entries are
# built in a temporary directory next to the final one and renamed into place,
# so a crashed or concurrent build never leaves a half-written entry behind.
#
# The last line of stdout is the assets directory; all progress goes to stderr.
# Versions can be overridden with ENVTEST_K8S_VERSION and ENVTEST_ETCD_VERSION.
set -euo pipefail

K=${ENVTEST_K8S_VERSION:-1.37.2}
E=${ENVTEST_ETCD_VERSION:-3.7.0}
CACHE=${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}
PARENT="$CACHE/envtest"
DEST="$PARENT/k8s-$K-etcd-$E"

log() { echo "envtest-assets: $*" >&2; }

# complete reports whether dir holds a finished build: the stamp is written
# last, before the rename, so its presence means both binaries are whole.
complete() { [ -f "$1/.complete" ] && [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ]; }

if complete "$DEST"; then
  log "using cached $DEST"
  echo "$DEST"
  exit 0
fi

export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go is not installed"; exit 1; }
# The wrapper modules below live in a temp dir and must not see a go.work or
# flags of the caller's module.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

mkdir -p "$PARENT"
# Serialize cold builds of one version: a second caller waits for the first
# and then reuses its result instead of spending another 2.4 GB and minutes.
if command -v flock >/dev/null; then
  exec 9>"$PARENT/.k8s-$K-etcd-$E.lock"
  flock 9
  if complete "$DEST"; then
    log "using $DEST, built meanwhile by another run"
    echo "$DEST"
    exit 0
  fi
  rm -rf "$PARENT/.build-k8s-$K-etcd-$E."* # left by a run killed with SIGKILL
fi
STAGE=$(mktemp -d "$PARENT/.build-k8s-$K-etcd-$E.XXXXXX") # same filesystem: rename is atomic
W=$(mktemp -d)
trap 'rm -rf "$W" "$STAGE"' EXIT
mkdir -p "$W/k" "$W/e"
start=$(date +%s)
log "building kube-apiserver v$K and etcd v$E (this takes several minutes)"

# --- kube-apiserver: k8s.io/kubernetes requires its staging modules at
# v0.0.0 and replaces them with ./staging paths; a consumer must replace each
# with the published v0.<minor>.<patch> instead.
(
  cd "$W/k"
  S=0.${K#1.}
  printf 'module local/k8sbuild\n\ngo 1.26.0\n\ngodebug default=go1.26\n\nrequire k8s.io/kubernetes v%s\n' "$K" > go.mod
  MOD=$(go mod download -json "k8s.io/kubernetes@v$K" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  [ -n "$MOD" ] || { log "cannot download k8s.io/kubernetes@v$K"; exit 1; }
  { echo 'replace ('
    awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f{print $1}' "$MOD" |
      grep -v -e sample-cli-plugin -e sample-controller |   # not published on the proxy, not needed
      while read -r m; do echo "	$m => $m v$S"; done
    echo ')'; } >> go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go
  go mod tidy
  MINOR=$(echo "$K" | cut -d. -f2)
  V="-X k8s.io/component-base/version.gitVersion=v$K -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR"
  go build -trimpath -ldflags="-s -w $V" -o "$STAGE/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
) >&2
log "kube-apiserver built after $(( $(date +%s) - start ))s"

# --- etcd: the module root of go.etcd.io/etcd/server/v3 is package main.
(
  cd "$W/e"
  printf 'module local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$E" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  go mod tidy
  go build -trimpath -ldflags="-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
) >&2

"$STAGE/kube-apiserver" --version >&2
# sed reads all of it: with head, etcd could die of SIGPIPE on its second
# line and, under pipefail, fail the whole build after it had succeeded.
"$STAGE/etcd" --version | sed -n 1p >&2
touch "$STAGE/.complete"
chmod 755 "$STAGE"

# rename(2) onto an existing non-empty directory fails: if a concurrent build
# won, keep its entry; if a stale incomplete entry is in the way, replace it.
if ! mv -T "$STAGE" "$DEST" 2>/dev/null; then
  if ! complete "$DEST"; then
    rm -rf "$DEST"
    mv -T "$STAGE" "$DEST"
  fi
fi
log "built in $(( $(date +%s) - start ))s: $DEST"
echo "$DEST"
