package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

var listPages = flag.Int("list-pages", 600, "ListUsers pages TestListUsersDuringBrokerWork reads")

// TestListUsersDuringBrokerWork pages ListUsers on the embedded IAM
// listener as the root user, as an operator's script or admin audit does,
// with the SDK's default HTTP client as internal/sdkhttp fixes it (without
// the fix about one page in 2,500 failed on a loaded machine: the client's
// race, not the server's) and no retries, while the broker
// provisions, binds, unbinds and deprovisions in racing duplicates and
// refuses bad input (a malformed body, one of 2 MiB) between them: every
// page must be read to its end. -list-pages sets how many pages; a run of
// 20,000 is the longer check.
func TestListUsersDuringBrokerWork(t *testing.T) {
	b := budgeted(t)
	b.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+time.Duration(*listPages)*10*time.Millisecond)
	defer cancel()
	// Standing bindings make the pages long, as on a broker in use.
	for i := range 40 {
		inst := fmt.Sprintf("/v2/service_instances/standing-%d", i)
		untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
		for j := range 4 {
			untilDone(t, b, "PUT", fmt.Sprintf("%s/service_bindings/standing-%d-%d", inst, i, j), bindBody, http.StatusCreated)
		}
	}
	stop := make(chan struct{})
	var work sync.WaitGroup
	var lives atomic.Int64
	for w := range 3 {
		work.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				inst := fmt.Sprintf("/v2/service_instances/w%d-%d", w, i)
				bind := fmt.Sprintf("%s/service_bindings/w%d-%d", inst, w, i)
				var twice sync.WaitGroup
				for range 2 { // the same request twice at once, as platforms do
					twice.Go(func() {
						b.Do("PUT", inst, provisionBody)
						b.Do("PUT", bind, bindBody)
						b.Do("DELETE", bind+deleteQuery, nil)
						b.Do("DELETE", inst+deleteQuery, nil)
					})
				}
				twice.Wait()
				b.Do("PUT", inst, map[string]any{"service_id": "nonsense"}) // bad input between
				b.Do("PUT", inst, map[string]any{"parameters": strings.Repeat("x", 2<<20)})
				if r := b.Do("DELETE", inst+deleteQuery, nil); r.Err == nil && (r.Code == http.StatusOK || r.Code == http.StatusGone) {
					lives.Add(1)
				}
			}
		})
	}
	creds := credentials.NewStaticCredentialsProvider(b.Backend.AccessKey, b.Backend.SecretKey, "")
	var pages, failed atomic.Int64
	var first atomic.Value
	var listers sync.WaitGroup
	for range 4 {
		listers.Go(func() {
			c := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.IAM), Credentials: creds, Retryer: aws.NopRetryer{}})
			for pages.Load() < int64(*listPages) && ctx.Err() == nil {
				p := iam.NewListUsersPaginator(c, &iam.ListUsersInput{})
				for p.HasMorePages() {
					pages.Add(1)
					if _, err := p.NextPage(ctx); err != nil {
						if ctx.Err() == nil {
							failed.Add(1)
							first.CompareAndSwap(nil, err.Error())
						}
						break
					}
				}
			}
		})
	}
	listers.Wait()
	close(stop)
	work.Wait()
	t.Logf("%d pages listed during %d instance lives", pages.Load(), lives.Load())
	if n := failed.Load(); n > 0 {
		msg, _ := first.Load().(string)
		t.Errorf("%d of %d pages failed; the first: %s", n, pages.Load(), msg)
	}
	if lives.Load() < 5 {
		t.Errorf("%d instance lives while listing, want 5 at least", lives.Load())
	}
}
