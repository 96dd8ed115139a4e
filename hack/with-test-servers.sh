#!/usr/bin/env bash
# Runs a command with every real server the tests need started on 127.0.0.1,
# then stops them, whatever the command's outcome:
#   - versitygw as separate processes (S3 gateway + standalone IAM service),
#     for the s3iam driver's conformance suite against a real process;
#   - PostgreSQL (installed from Debian packages when missing), a throwaway
#     cluster for the PostgreSQL store's tests;
#   - kube-apiserver and etcd binaries for envtest (built from the Go module
#     proxy once, hack/envtest-assets.sh; envtest starts them per test run);
#   - helm (built from the module proxy once, hack/helm.sh) and podman
#     (Debian packages, hack/podman.sh) for the chart and image tests of
#     test/deploy; without podman the image tests skip with the reason;
#   - SeaweedFS (`weed mini`), for the s3iam driver's conformance suite
#     against a second S3 + IAM implementation. Optional: it starts only when
#     its build is already cached (hack/seaweedfs.sh build, about 8 minutes
#     and 2.6 GB of build cache cold) or BUCKETBROKER_SEAWEEDFS=1 asks for
#     the build; BUCKETBROKER_SEAWEEDFS=0 leaves it out. Left out, its test
#     skips and says why.
#   - MinIO, for the minio driver's suites and the e2e, claim and quota
#     tests on it. Optional in the same way: it starts only when its build
#     is already cached (hack/minio.sh build, about 25 minutes cold) or
#     BUCKETBROKER_MINIO=1 asks for the build; BUCKETBROKER_MINIO=0 leaves
#     it out. Left out, its tests skip and say how to run them.
#
# The embedded S3 server and SQLite run inside the tests themselves.
# Builds are cached under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker},
# keyed by version, so only the first run on a machine pays for them;
# hack/tools.sh (`make tools`, which `make test` runs first) builds them all
# at once.
#
#   hack/with-test-servers.sh go test ./...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bucketbroker-test-servers.XXXXXX")
chmod 755 "$work" # PostgreSQL runs as its own user and must reach its folder
cleanup() {
  hack/seaweedfs.sh stop "$work/seaweedfs" >&2 || true
  hack/minio.sh stop "$work/minio" >&2 || true
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
# optional NAME SCRIPT VAR HOW_LONG starts the optional server NAME with
# hack/SCRIPT.sh in $work/SCRIPT and takes its environment, when its build is
# cached or $VAR is 1 (which builds it: about HOW_LONG). When $VAR is 0, or
# nothing is cached, it leaves the server out, says why, and sets skip to the
# reason; its tests skip.
optional() {
  local name=$1 script=$2 var=$3 how_long=$4 env
  skip=""
  case "${!var:-}" in
    1) ;;
    0) skip="$var=0 left $name out" ;;
    *) "hack/$script.sh" cached >/dev/null 2>&1 ||
         skip="no cached $name build (hack/$script.sh build, or $var=1, builds it: about $how_long)" ;;
  esac
  if [ -n "$skip" ]; then
    echo "$name left out: $skip; its tests skip" >&2
    return 0
  fi
  env=$("hack/$script.sh" start "$work/$script")
  eval "$env"
}
optional SeaweedFS seaweedfs BUCKETBROKER_SEAWEEDFS "8 minutes"
# The SeaweedFS test reads the reason: in CI an optional server left out is a
# skip, not a failure.
[ -z "$skip" ] || export BUCKETBROKER_TEST_SEAWEEDFS_SKIP="$skip"
optional MinIO minio BUCKETBROKER_MINIO "25 minutes"
KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -n 1)
export KUBEBUILDER_ASSETS
# helm, for the chart tests (test/deploy): built from the module proxy once
# and cached, with kube-apiserver (hack/k8s-tools.sh).
BUCKETBROKER_TEST_HELM=$(hack/helm.sh | tail -n 1)
export BUCKETBROKER_TEST_HELM
# podman, for the image tests (test/deploy): installed from Debian packages
# when missing (hack/podman.sh). Where it cannot be installed or cannot run
# a container, the image tests skip with the reason.
if podman_out=$(hack/podman.sh ensure 2>&1); then
  BUCKETBROKER_TEST_PODMAN=$(tail -n 1 <<<"$podman_out")
  export BUCKETBROKER_TEST_PODMAN
else
  export BUCKETBROKER_TEST_PODMAN_SKIP="podman unavailable: $(tail -n 1 <<<"$podman_out")"
  echo "image tests left out: $BUCKETBROKER_TEST_PODMAN_SKIP" >&2
fi
echo "test servers ready in $(( $(date +%s) - t0 ))s" >&2

# With the servers up, a test that finds one missing is a failure, not a skip
# (except SeaweedFS when it was left out above: its test reads the reason).
export CI=true
set +e
"$@"
status=$?
set -e
exit "$status"
