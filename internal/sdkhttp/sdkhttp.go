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

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Client returns c, or the SDK's default client when c is nil, wrapped so
// that the transport never sees a request body's WriteTo.
func Client(c *http.Client) aws.HTTPClient {
	if c == nil {
		return Wrap(awshttp.NewBuildableClient())
	}
	return Wrap(c)
}

// Wrap wraps any SDK HTTP client the same way.
func Wrap(c aws.HTTPClient) aws.HTTPClient { return client{c} }

type client struct{ next aws.HTTPClient }

func (c client) Do(req *http.Request) (*http.Response, error) {
	if _, ok := req.Body.(io.WriterTo); ok {
		r := req.Clone(req.Context())
		r.Body = readCloser{req.Body}
		req = r
	}
	return c.next.Do(req)
}

// readCloser hides every method of a body but Read and Close.
type readCloser struct{ io.ReadCloser }
