#!/usr/bin/env bash
# Print the path of helm (last line of stdout; progress on stderr), built
# from the Go module proxy once by hack/k8s-tools.sh together with
# kube-apiserver and controller-gen, and cached:
#
#   HELM=$(hack/helm.sh | tail -n 1)
set -euo pipefail
echo "$("$(dirname "${BASH_SOURCE[0]}")/k8s-tools.sh" | tail -n 1)/helm"
