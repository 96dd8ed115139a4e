#!/usr/bin/env bash
# Print the directory that holds envtest's control plane, kube-apiserver and
# etcd, for KUBEBUILDER_ASSETS (last line of stdout; progress on stderr):
#
#   export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -n 1)
#
# Both are built from the Go module proxy, once and cached, by
# hack/k8s-tools.sh together with helm and controller-gen (the same
# libraries, compiled once); ENVTEST_K8S_VERSION and ENVTEST_ETCD_VERSION
# choose the versions. The directory holds those two tools as well, which
# envtest ignores.
set -euo pipefail
"$(dirname "${BASH_SOURCE[0]}")/k8s-tools.sh" | tail -n 1
