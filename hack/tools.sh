#!/usr/bin/env bash
# Builds and installs, all at once, what `make test` needs from outside the
# tree, so that a first run on a new machine waits for the longest of them
# rather than for their sum:
#   - kube-apiserver, etcd, helm and controller-gen (hack/k8s-tools.sh, one
#     build);
#   - golangci-lint (hack/golangci-lint.sh) and versitygw (hack/versitygw.sh);
#   - PostgreSQL, podman, runc and promtool (Debian's prometheus package, for
#     the chart's alert rules) from Debian packages, when missing, in one
#     apt-get run (as root; elsewhere the scripts that need them say what to
#     install);
#   - into Go's build cache, the module's two builds: with the race detector
#     (the tests'; the packages they import are the module's), and without
#     it as the image is built (CGO_ENABLED=0, -trimpath), which is also the
#     build of `go vet`, golangci-lint and the tests' broker binaries.
# Everything is cached: on a machine that has run it once, it returns in
# seconds. Each job's output goes to a log; a failed job's tail is printed.
#
#   hack/tools.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
logs=$(mktemp -d "${TMPDIR:-/tmp}/bucketbroker-tools.XXXXXX")
trap 'rm -rf "$logs"' EXIT

apt_packages() {
  local want=()
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || want+=(postgresql)
  command -v podman >/dev/null || want+=(podman)
  command -v runc >/dev/null || want+=(runc)
  command -v promtool >/dev/null || want+=(prometheus)
  ((${#want[@]})) || return 0
  if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "not root or no apt-get: left to the scripts that need ${want[*]}"
    return 0
  fi
  # podman's own lock (hack/podman.sh): a test run may install at once.
  (
    flock 9
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}"
  ) 9>/tmp/bucketbroker-podman-install.lock
}

declare -A pids=()
run() {
  local name=$1
  shift
  ( t=$(date +%s); "$@"; echo "$name: done in $(($(date +%s) - t))s" ) >"$logs/$name.log" 2>&1 &
  pids[$name]=$!
}
t0=$(date +%s)
run k8s-tools hack/k8s-tools.sh
run golangci-lint hack/golangci-lint.sh
run versitygw hack/versitygw.sh build
run apt apt_packages
run go-build-race go build -race ./...
run go-build env CGO_ENABLED=0 go build -trimpath ./...

failed=0
for name in "${!pids[@]}"; do
  if wait "${pids[$name]}"; then
    tail -n 1 "$logs/$name.log" >&2
  else
    echo "tools: $name failed; its log ends:" >&2
    tail -n 30 "$logs/$name.log" >&2
    failed=1
  fi
done
echo "tools: ready in $(($(date +%s) - t0))s" >&2
exit "$failed"
