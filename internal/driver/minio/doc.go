// Package minio is the driver for MinIO, which manages users through its
// own admin API (package adminapi), not AWS IAM.
//
// # Buckets
//
// Buckets are made, marked, purged and deleted through the S3 API exactly
// as the s3iam driver does (owner mark in the bucket tag
// bucketbroker.io/owner): this driver calls an s3iam driver for them.
//
// # Users and keys
//
// A MinIO user's access key is its name, and it has one secret: setting a
// new one replaces the old. The keys this driver hands out are the user's
// service accounts instead, any number of them, each with the user's
// rights, each deleted on its own, all deleted with the user. The user's
// own secret is random and kept by no one.
//
// # Owner marks
//
// MinIO keeps no tags on users. The mark is kept in the user's canned
// policy, named bucketbroker-<user>: the Sid of its Deny statement is
// bucketbroker.io/owner=<mark>. Only the admin can change a policy or
// attach one, so a user carries our mark when that policy is attached to
// it and names the mark. The Deny is of admin:CreateServiceAccount and
// admin:CreateUser, the two actions by which MinIO otherwise lets any user
// mint its own keys. A new user is made in three calls (the policy, the
// user, the attachment): a crash between the last two leaves an unmarked
// user of ours, which a retry under AdoptUnmarked adopts.
//
// Revoking a user removes it (its service accounts go with it, and stop
// at once) and then its policy.
package minio
