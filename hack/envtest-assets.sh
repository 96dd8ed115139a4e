#!/usr/bin/env bash
# Build the envtest control plane (kube-apiserver + etcd) from the Go module
# proxy and print the directory that holds them, for KUBEBUILDER_ASSETS:
#
#   export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -n 1)
#
# Why build instead of download: the only network the CI and developer
# machines are guaranteed to have is the Go module proxy, and building from
# it pins the exact source by go.sum. kube-apiserver comes from
# hack/k8s-tools.sh, which builds it together with helm and controller-gen
# (they share most of their libraries); etcd is built here. Both are cached
# by version, and the directory printed is
#   ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/envtest/k8s-<k8s>-etcd-<etcd>/
# A complete entry is reused without running go. Entries are built in a
# temporary directory next to the final one and renamed into place, so a
# crashed or concurrent build never leaves a half-written entry behind.
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
mkdir -p "$W/e"
start=$(date +%s)
log "building etcd v$E, and kube-apiserver v$K unless cached (minutes, once)"

# --- kube-apiserver: from the shared build of the Kubernetes tools, which
# runs beside the etcd build below.
ENVTEST_K8S_VERSION="$K" "$(dirname "$0")/k8s-tools.sh" >"$W/tools" &
tools_pid=$!

# --- etcd: the module root of go.etcd.io/etcd/server/v3 is package main.
(
  cd "$W/e"
  printf 'module local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$E" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  go mod tidy
  go build -trimpath -ldflags="-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
) >&2
wait "$tools_pid" || { log "hack/k8s-tools.sh failed"; exit 1; }
cp "$(tail -n 1 "$W/tools")/kube-apiserver" "$STAGE/kube-apiserver"

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
