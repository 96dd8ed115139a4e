#!/usr/bin/env bash
# Build golangci-lint from the Go module proxy once and print its path (last
# line of stdout; progress on stderr):
#
#   GOLANGCI_LINT=$(hack/golangci-lint.sh | tail -n 1)
#
# `make lint` runs it with the repository's .golangci.yml. Like the other
# tools it is built, not downloaded (the module proxy is the one network every
# CI and developer machine is sure to have), and cached by version under
# ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools/. A cached build is
# reused without running go. The build goes to a temporary directory next to
# the entry and is renamed into place, so an interrupted build never leaves a
# binary that later runs would trust.
set -euo pipefail

GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
CACHE=${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}
DIR="$CACHE/tools/golangci-lint-$GOLANGCI_LINT_VERSION"
BIN="$DIR/golangci-lint"

log() { echo "golangci-lint: $*" >&2; }

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$CACHE/tools"
exec 9>"$CACHE/tools/.golangci-lint-$GOLANGCI_LINT_VERSION.lock"
flock 9
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
rm -rf "$CACHE/tools/.build-golangci-lint-$GOLANGCI_LINT_VERSION."* # left by a run killed with SIGKILL
stage=$(mktemp -d "$CACHE/tools/.build-golangci-lint-$GOLANGCI_LINT_VERSION.XXXXXX")
trap 'rm -rf "$stage"' EXIT
start=$(date +%s)
log "building golangci-lint $GOLANGCI_LINT_VERSION (several minutes, once)"
# go install pkg@version ignores the surrounding module; GOWORK/GOFLAGS are
# cleared so neither can leak in from the caller's environment.
(cd "$stage" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$stage" \
  go install -trimpath -ldflags="-s -w -X main.version=${GOLANGCI_LINT_VERSION#v}" \
  "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION") >&2
"$stage/golangci-lint" version >&2
chmod 755 "$stage"
mv -T "$stage" "$DIR" 2>/dev/null || rm -rf "$stage" # a concurrent build won: as good
[ -x "$BIN" ] || { log "golangci-lint missing after build: $BIN"; exit 1; }
log "built in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
