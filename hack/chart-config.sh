#!/usr/bin/env bash
# Keep config/ and the Helm chart one source of truth. The chart
# (charts/bucketbroker) is the source; this writes from it:
#
#   charts/bucketbroker/files/crds/*.yaml  copies of config/crd/bases (made from
#                                          api/ by hack/generate.sh)
#   config/manager/manager.yaml            the controller door, rendered with
#   config/rbac/*.yaml                     the chart's defaults, release
#   config/samples/storageclass.yaml       "bucketbroker" in bucketbroker-system
#
# usage: hack/chart-config.sh           rewrite them
#        hack/chart-config.sh --check   fail with a diff when they differ (make lint)
#
# helm is built once from the Go module proxy and cached (hack/helm.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
HELM=${HELM:-$(hack/helm.sh | tail -n 1)}
CHART=charts/bucketbroker

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/crds"
cp config/crd/bases/*.yaml "$W/crds/"

# render TEMPLATE... prints the named templates of the default controller
# install without helm's "# Source:" lines, under a do-not-edit header.
render() {
  local args=()
  for t in "$@"; do args+=(--show-only "templates/$t"); done
  echo "# Rendered from $CHART ($(printf "templates/%s " "$@")) by hack/chart-config.sh:" | sed "s/ )/)/"
  echo "# edit the chart, then run hack/chart-config.sh. Equivalent to"
  echo "#   helm install bucketbroker $CHART -n bucketbroker-system --create-namespace"
  # The chart in the tree may hold stale CRD copies: render a copy with the
  # fresh ones.
  "$HELM" template bucketbroker "$W/chart" -n bucketbroker-system --set createNamespace=true "${args[@]}" |
    sed -e '/^# Source: /d' | sed -e '1{/^---$/d}'
}
cp -R "$CHART" "$W/chart"
rm -f "$W/chart/files/crds/"*.yaml
cp "$W/crds/"*.yaml "$W/chart/files/crds/"
mkdir -p "$W/out/config/manager" "$W/out/config/rbac" "$W/out/config/samples" "$W/out/$CHART/files/crds"
render namespace.yaml controller/manager.yaml > "$W/out/config/manager/manager.yaml"
render controller/role.yaml > "$W/out/config/rbac/role.yaml"
render controller/role_binding.yaml > "$W/out/config/rbac/role_binding.yaml"
render controller/service_account.yaml > "$W/out/config/rbac/service_account.yaml"
render controller/storageclass.yaml > "$W/out/config/samples/storageclass.yaml"
cp "$W/crds/"*.yaml "$W/out/$CHART/files/crds/"

outputs() { (cd "$1" && find config/manager config/rbac config/samples/storageclass.yaml "$CHART/files/crds" -type f 2>/dev/null | LC_ALL=C sort); }
if $check; then
  status=0
  for f in $( { outputs "$ROOT"; outputs "$W/out"; } | LC_ALL=C sort -u); do
    diff -u --label "a/$f (in tree)" --label "b/$f (from the chart)" "$ROOT/$f" "$W/out/$f" || status=1
  done
  [ "$status" -eq 0 ] || { echo "chart-config: config/ is not what the chart renders; run hack/chart-config.sh" >&2; exit 1; }
  echo "chart-config: config/ matches the chart" >&2
  exit 0
fi
for f in $(outputs "$ROOT"); do [ -e "$W/out/$f" ] || rm -f "$ROOT/$f"; done
for f in $(outputs "$W/out"); do cp "$W/out/$f" "$ROOT/$f"; done
