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
