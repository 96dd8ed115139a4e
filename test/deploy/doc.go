// Package deploy tests bucketbroker as an operator installs it: the Helm
// chart (charts/bucketbroker) rendered by the real helm and every object it
// makes applied to a real kube-apiserver (envtest), for the main
// combinations of values; and the container image (make image) run as the
// chart's Deployments run it, with a read-only root filesystem, a non-root
// user and only the data volume writable.
//
// The tests need helm (BUCKETBROKER_TEST_HELM, built and cached by
// hack/helm.sh), envtest (KUBEBUILDER_ASSETS) and, for the image, podman
// (hack/podman.sh). hack/with-test-servers.sh provides all three; where
// podman cannot run it sets BUCKETBROKER_TEST_PODMAN_SKIP to the reason and
// the image tests skip with it.
package deploy
