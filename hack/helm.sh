#!/usr/bin/env bash
# Build helm from the Go module proxy once and print its path (last line of
# stdout; progress on stderr):
#
#   HELM=$(hack/helm.sh | tail -n 1)
#
# Like the other test tools it is built, not downloaded (the module proxy is
# the one network every CI and developer machine is sure to have), and cached
# by version under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools/.
# A cached build is reused without running go. The build goes to a temporary
# directory next to the entry and is renamed into place, so an interrupted
# build never leaves a binary that later runs would trust.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}
DIR="$CACHE/tools/helm-$HELM_VERSION"
BIN="$DIR/helm"

log() { echo "helm: $*" >&2; }

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$CACHE/tools"
exec 9>"$CACHE/tools/.helm-$HELM_VERSION.lock"
flock 9
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
rm -rf "$CACHE/tools/.build-helm-$HELM_VERSION."* # left by a run killed with SIGKILL
stage=$(mktemp -d "$CACHE/tools/.build-helm-$HELM_VERSION.XXXXXX")
trap 'rm -rf "$stage"' EXIT
start=$(date +%s)
log "building helm $HELM_VERSION (a few minutes, once)"
(cd "$stage" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$stage" \
  go install -trimpath -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
"$stage/helm" version --short >&2
chmod 755 "$stage"
mv -T "$stage" "$DIR" 2>/dev/null || rm -rf "$stage" # a concurrent build won: as good
[ -x "$BIN" ] || { log "helm missing after build: $BIN"; exit 1; }
log "built in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
