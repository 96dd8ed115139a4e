// Command vendor-provisioner shows how a storage vendor runs bucketbroker's
// ObjectBucketClaim controller with its own driver: implement driver.Driver,
// hand it to provisioner.New, add it to a controller-runtime manager.
//
// Its driver keeps buckets and users in memory, which is enough to watch
// claims become Bound on a development cluster:
//
//	go run ./examples/vendor-provisioner --kubeconfig ~/.kube/config
package main
