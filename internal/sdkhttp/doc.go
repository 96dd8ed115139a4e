// Package sdkhttp is the HTTP client every aws-sdk-go-v2 client of
// bucketbroker uses: the SDK's own, with request bodies handed to the
// transport without their WriteTo method.
//
// Why: the SDK wraps each request body in a reader (smithy-go's
// safeReadCloser) whose WriteTo returns io.EOF once the body is closed, and
// it closes the body as soon as the response headers are in. Go's HTTP/1
// transport, after writing a body of known length, copies what is left of
// it into io.Discard, which uses that WriteTo. When the server answers
// before the transport's writer gets there (the writer is descheduled on a
// loaded machine, and a small IAM request is answered in microseconds),
// the copy fails with io.EOF, the transport takes that for a write error
// and closes the connection, and the reader of the 200 response already
// handed to the caller fails: "deserialization failed, read tcp ...: use
// of closed network connection". A call that the server carried out then
// reads as failed, and a retry of CreateAccessKey would make a second key.
// Without WriteTo the copy reads the closed body through Read, which ends
// with a clean io.EOF.
package sdkhttp
