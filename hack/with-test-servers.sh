#!/usr/bin/env bash
# Runs a command with every real server the tests need started on 127.0.0.1,
# then stops them, whatever the command's outcome:
#   - versitygw as separate processes (S3 gateway + standalone IAM service),
#     for the s3iam driver's conformance suite against a real process;
#   - PostgreSQL (installed from Debian packages when missing), a throwaway
#     cluster for the PostgreSQL store's tests;
#   - kube-apiserver and etcd binaries for envtest (built from the Go module
#     proxy once: about 15 minutes cold; envtest starts them per test run).
#
# The embedded S3 server and SQLite run inside the tests themselves.
# Builds are cached under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker},
# keyed by version, so only the first run on a machine pays for them.
#
#   hack/with-test-servers.sh go test ./...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bucketbroker-test-servers.XXXXXX")
chmod 755 "$work" # PostgreSQL runs as its own user and must reach its folder
cleanup() {
  hack/versitygw.sh stop "$work/vgw" >&2 || true
  hack/postgres.sh stop "$work/pg" >&2 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
# (assignments first: `eval "$(cmd)"` would hide a failing cmd from set -e)
vgw_env=$(hack/versitygw.sh start "$work/vgw")
pg_env=$(hack/postgres.sh start "$work/pg")
eval "$vgw_env"
eval "$pg_env"
KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -n 1)
export KUBEBUILDER_ASSETS
echo "test servers ready in $(( $(date +%s) - t0 ))s" >&2

# With the servers up, a test that finds one missing is a failure, not a skip.
export CI=true
set +e
"$@"
status=$?
set -e
exit "$status"
