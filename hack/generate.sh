#!/usr/bin/env bash
# Regenerate everything derived from the API types in api/:
#
#   api/**/zz_generated.deepcopy.go    controller-gen object (DeepCopy methods)
#   config/crd/bases/*.yaml            controller-gen crd
#   config/crd/test/pruning/*.yaml     test-only CRD variants, derived below
#
# usage: hack/generate.sh           regenerate in place
#        hack/generate.sh --check   fail with a diff if the files in the tree are
#                                   not what the types generate (for CI)
#
# controller-gen is built from the Go module proxy once per version and cached
# (hack/k8s-tools.sh); a cached build is reused without running go.
#
# Both modes generate into a scratch copy of the module (go.mod, go.sum, api/)
# and then either copy the results back or compare them, so --check tests
# exactly what a regeneration would write, and stale files (a CRD for a type
# that no longer exists) are caught as well as changed ones.
set -euo pipefail

CONTROLLER_GEN_VERSION=v0.23.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CG=""

log() { echo "generate: $*" >&2; }

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

export PATH="/usr/local/go/bin:$PATH"

# ensure_controller_gen sets CG to controller-gen, built by hack/k8s-tools.sh
# (with kube-apiserver and helm, cached).
ensure_controller_gen() {
  local tools
  tools=$(CONTROLLER_GEN_VERSION="$CONTROLLER_GEN_VERSION" "$ROOT/hack/k8s-tools.sh" | tail -n 1) || return 1
  CG="$tools/controller-gen"
}

# prune_variant writes the ObjectBucketClaim CRD without spec.objectBucketName
# in its schema: the API server then prunes that field on every write and
# read, as the CRDs shipped by Rook and NooBaa did (rook#6650,
# noobaa-operator#507). It deletes the one "objectBucketName:" property key and
# every line indented deeper than it, and fails unless there was exactly one,
# so a change in controller-gen's output cannot silently produce a variant
# that still has the field.
prune_variant() {
  local in=$1 out=$2
  mkdir -p "$(dirname "$out")"
  {
    echo "# TEST ONLY: $(basename "$in") without spec.objectBucketName in its"
    echo "# schema, so the API server prunes that field (rook#6650). Derived from"
    echo "# config/crd/bases by hack/generate.sh; do not edit, do not install in a cluster."
    awk '
      { match($0, /^ */); cur = RLENGTH }
      skip && cur > ind { next }
      { skip = 0 }
      /^ *objectBucketName:$/ { ind = cur; skip = 1; found++; next }
      { print }
      END {
        if (found != 1) {
          printf "generate: expected one objectBucketName property, found %d\n", found > "/dev/stderr"
          exit 1
        }
      }' "$in"
  } > "$out"
}

# outputs lists the generated files under dir, relative to it.
outputs() {
  (cd "$1" && {
     find api -type f -name 'zz_generated.*.go'
     find config/crd/bases config/crd/test/pruning -type f -name '*.yaml'
   } 2>/dev/null | LC_ALL=C sort)
}

ensure_controller_gen

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/hack"
cp "$ROOT/go.mod" "$ROOT/go.sum" "$W/"
cp "$ROOT/hack/boilerplate.go.txt" "$W/hack/"
cp -R "$ROOT/api" "$W/api"

(
  cd "$W"
  # The deepcopy file is kept in the copy (the types do not compile without
  # it); controller-gen rewrites it.
  GOWORK=off "$CG" object:headerFile=hack/boilerplate.go.txt paths=./api/... \
    crd paths=./api/... output:crd:artifacts:config=config/crd/bases
  prune_variant config/crd/bases/objectbucket.io_objectbucketclaims.yaml \
    config/crd/test/pruning/objectbucket.io_objectbucketclaims.yaml
) >&2

if $check; then
  # Compare the union of files on both sides, so missing and stale files fail too.
  status=0
  for f in $( { outputs "$ROOT"; outputs "$W"; } | LC_ALL=C sort -u); do
    if ! diff -u --label "a/$f (in tree)" --label "b/$f (generated)" \
         "$ROOT/$f" "$W/$f" 2>/dev/null; then
      [ -e "$ROOT/$f" ] || echo "missing in tree: $f"
      [ -e "$W/$f" ] || echo "stale in tree (not generated): $f"
      status=1
    fi
  done
  if [ "$status" -ne 0 ]; then
    log "generated files are out of date; run hack/generate.sh"
    exit 1
  fi
  log "generated files are up to date"
  exit 0
fi

# Remove generated files that are no longer generated, then copy the new ones.
for f in $(outputs "$ROOT"); do
  [ -e "$W/$f" ] || { log "removing stale $f"; rm -f "$ROOT/$f"; }
done
for f in $(outputs "$W"); do
  mkdir -p "$ROOT/$(dirname "$f")"
  cmp -s "$W/$f" "$ROOT/$f" 2>/dev/null || { log "writing $f"; cp "$W/$f" "$ROOT/$f"; }
done
