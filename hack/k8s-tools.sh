#!/usr/bin/env bash
# Build kube-apiserver and etcd (envtest's control plane), helm and
# controller-gen from the Go module proxy in ONE go build, and print the
# directory that holds the four (last line of stdout; progress on stderr):
#
#   TOOLS=$(hack/k8s-tools.sh | tail -n 1)   # $TOOLS/kube-apiserver, etcd, helm, controller-gen
#
# Why one build: the four are mostly the same libraries. helm and
# controller-gen are the Kubernetes libraries (apimachinery, api, client-go,
# apiserver, apiextensions-apiserver, component-base) at one minor version;
# etcd is the etcd server kube-apiserver's own go.mod requires, with the
# same gRPC, protobuf, OpenTelemetry and Prometheus libraries. Built one by
# one, each compiles its own copy of them at its own patch level (and, run
# side by side, at the same time); built together in one module, Go selects
# one version of each library and compiles it once.
#
# Why build instead of download: the only network the CI and developer
# machines are sure to have is the Go module proxy, and building from it pins
# the exact source by go.sum.
#
# The result is cached by the four versions under
#   ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/k8s-tools/k8s-<k>-etcd-<e>-helm-<h>-cg-<c>/
# and reused without running go. It is built in a temporary directory next to
# that entry and renamed into place under a lock, so a crashed or concurrent
# build never leaves a half-written entry. Versions can be overridden with
# ENVTEST_K8S_VERSION, ENVTEST_ETCD_VERSION (not below the etcd the
# Kubernetes version requires: Go would select that one), HELM_VERSION and
# CONTROLLER_GEN_VERSION.
set -euo pipefail

K=${ENVTEST_K8S_VERSION:-1.37.2}
E=${ENVTEST_ETCD_VERSION:-3.7.0}
H=${HELM_VERSION:-v3.22.0}
C=${CONTROLLER_GEN_VERSION:-v0.23.0}
CACHE=${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}
PARENT="$CACHE/k8s-tools"
NAME="k8s-$K-etcd-$E-helm-$H-cg-$C"
DEST="$PARENT/$NAME"

log() { echo "k8s-tools: $*" >&2; }

# complete reports whether dir holds a finished build: the stamp is written
# last, before the rename, so its presence means all four binaries are whole.
complete() {
  [ -f "$1/.complete" ] && [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ] && [ -x "$1/helm" ] && [ -x "$1/controller-gen" ]
}

if complete "$DEST"; then
  echo "$DEST"
  exit 0
fi

export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go is not installed"; exit 1; }
# The wrapper module lives in a temp dir and must not see a go.work or flags
# of the caller's module.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

mkdir -p "$PARENT"
exec 9>"$PARENT/.$NAME.lock"
flock 9
if complete "$DEST"; then
  log "using $DEST, built meanwhile by another run"
  echo "$DEST"
  exit 0
fi
rm -rf "$PARENT/.build-$NAME."* # left by a run killed with SIGKILL
STAGE=$(mktemp -d "$PARENT/.build-$NAME.XXXXXX") # same filesystem: rename is atomic
W=$(mktemp -d)
trap 'rm -rf "$W" "$STAGE"' EXIT
start=$(date +%s)
log "building kube-apiserver v$K, etcd v$E, helm $H and controller-gen $C (minutes, once)"
(
  cd "$W"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces
  # them with ./staging paths; a consumer must replace each with the
  # published v0.<minor>.<patch> instead.
  S=0.${K#1.}
  printf 'module local/k8stools\n\ngo 1.26.0\n\ngodebug default=go1.26\n\nrequire (\n\tk8s.io/kubernetes v%s\n\tgo.etcd.io/etcd/server/v3 v%s\n\thelm.sh/helm/v3 %s\n\tsigs.k8s.io/controller-tools %s\n)\n' "$K" "$E" "$H" "$C" >go.mod
  MOD=$(go mod download -json "k8s.io/kubernetes@v$K" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  [ -n "$MOD" ] || { log "cannot download k8s.io/kubernetes@v$K"; exit 1; }
  { echo 'replace ('
    awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f{print $1}' "$MOD" |
      grep -v -e sample-cli-plugin -e sample-controller |   # not published on the proxy, not needed
      while read -r m; do echo "	$m => $m v$S"; done
    echo ')'; } >>go.mod
  # The etcd module's root is its server's package main.
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "go.etcd.io/etcd/server/v3"\n\t_ "helm.sh/helm/v3/cmd/helm"\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "sigs.k8s.io/controller-tools/cmd/controller-gen"\n)\n' >tools.go
  go mod tidy
  MINOR=$(echo "$K" | cut -d. -f2)
  V="-X k8s.io/component-base/version.gitVersion=v$K -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR"
  V="$V -X helm.sh/helm/v3/internal/version.version=$H -X sigs.k8s.io/controller-tools/pkg/version.version=$C"
  got=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  [ "$got" = "v$E" ] || { log "Kubernetes v$K requires etcd $got, above v$E: set ENVTEST_ETCD_VERSION=${got#v}"; exit 1; }
  go build -trimpath -ldflags="-s -w $V" -o "$STAGE/" \
    k8s.io/kubernetes/cmd/kube-apiserver helm.sh/helm/v3/cmd/helm sigs.k8s.io/controller-tools/cmd/controller-gen
  # etcd after them, named: the libraries it shares are in the build cache now.
  go build -trimpath -ldflags="-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
) >&2
"$STAGE/kube-apiserver" --version >&2
# sed reads all of it: with head, etcd could die of SIGPIPE on its second
# line and, under pipefail, fail the whole build after it had succeeded.
"$STAGE/etcd" --version | sed -n 1p >&2
"$STAGE/helm" version --short >&2
"$STAGE/controller-gen" --version >&2
touch "$STAGE/.complete"
chmod 755 "$STAGE"
# rename(2) onto an existing non-empty directory fails: if a stale
# incomplete entry is in the way, replace it.
if ! mv -T "$STAGE" "$DEST" 2>/dev/null; then
  rm -rf "$DEST"
  mv -T "$STAGE" "$DEST"
fi
log "built in $(( $(date +%s) - start ))s: $DEST"
echo "$DEST"
