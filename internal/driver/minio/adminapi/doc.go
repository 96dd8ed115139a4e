// Package adminapi is a client of MinIO's admin REST API
// (/minio/admin/v3/...), the API through which MinIO manages its users and
// their policies (MinIO has no AWS IAM API). It covers what a driver needs:
// users (add, remove, info, list), their service accounts (add, list,
// delete), canned policies (add, read, remove, attach to a user, detach)
// and buckets' quotas (a hard limit on size; MinIO has none on the number
// of objects).
//
// # Why it is written here
//
// MinIO's own client of this API, github.com/minio/madmin-go, is licensed
// AGPL-3.0, which bucketbroker does not link. This package speaks the same
// wire protocol from MinIO's public API behavior, with permissively
// licensed parts only:
//
//   - github.com/aws/aws-sdk-go-v2/aws/signer/v4 (Apache-2.0) signs every
//     request with AWS Signature Version 4 for service "s3", as MinIO
//     checks admin requests like S3 ones: the admin's access key and
//     secret key are MinIO's root user (or a user allowed the admin:*
//     actions).
//   - golang.org/x/crypto/argon2 (BSD-3-Clause) and the standard library's
//     crypto/pbkdf2 derive the keys of encrypted bodies.
//   - github.com/secure-io/sio-go (MIT) is the authenticated stream cipher
//     MinIO's encrypted bodies use.
//
// # Encrypted bodies
//
// The bodies of the add-user (it carries the user's secret key), attach and
// detach requests, and of the list-users, attach and detach answers, are
// encrypted with the admin's secret key, the one key both ends hold:
//
//	salt (32 bytes) | algorithm id (1) | nonce (8) | sio stream
//
// The stream's key is derived from the secret key and the salt: with
// Argon2id (1 pass, 64 MiB, 4 lanes) for id 0 (AES-256-GCM) and id 1
// (ChaCha20-Poly1305), with PBKDF2-SHA256 (8192 rounds) for id 2
// (AES-256-GCM, what a server in FIPS mode sends). This package decrypts
// all three and encrypts with id 0, which every server accepts. Each
// derivation with Argon2id takes 64 MiB of memory for a moment, so
// derivations run one at a time in the process.
//
// # Errors
//
// A refusal by the server is an *Error with the server's code and message;
// errors.Is tells the codes a caller branches on: ErrNoSuchUser,
// ErrNoSuchPolicy, ErrNoSuchServiceAccount, ErrCredentialsRejected (a
// wrong or unknown admin key), ErrPolicyChangeAlreadyApplied. Secret keys never appear in errors.
//
// Each call is one request, with a deadline (Config.CallTimeout) when the
// caller's context has none, and is not retried here: the caller decides
// what is worth another attempt.
package adminapi
