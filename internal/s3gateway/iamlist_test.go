package s3gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// TestListUsersDuringChanges pages ListUsers as the root user, with the
// SDK's default HTTP client and no retries, at 4-way concurrency, while
// other clients create and delete users, keys and policies as the broker
// does: every page must be read to its end.
func TestListUsersDuringChanges(t *testing.T) {
	for name, churn := range map[string]func(*Server) string{
		"changes through the own listener":    (*Server).OwnIAMEndpoint,
		"changes through the public listener": (*Server).IAMEndpoint,
	} {
		t.Run(name, func(t *testing.T) { listUsersDuringChanges(t, churn) })
	}
}

func listUsersDuringChanges(t *testing.T, churnEndpoint func(*Server) string) {
	cfg := testConfig(t, t.TempDir())
	srv := start(t, cfg)
	creds := credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, "")
	newIAM := func(endpoint string) *iam.Client {
		return iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: IAMRegion, BaseEndpoint: aws.String(endpoint), Credentials: creds, Retryer: aws.NopRetryer{}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	admin := newIAM(srv.IAMEndpoint())
	for i := range 300 {
		if _, err := admin.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(fmt.Sprintf("base-%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for w := range 4 {
		churn.Go(func() {
			c := newIAM(churnEndpoint(srv))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := aws.String(fmt.Sprintf("churn-%d-%d", w, i))
				if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: name}); err != nil {
					continue
				}
				k, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: name})
				_, _ = c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: name, PolicyName: aws.String("p"),
					PolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}`)})
				_, _ = c.DeleteUserPolicy(ctx, &iam.DeleteUserPolicyInput{UserName: name, PolicyName: aws.String("p")})
				if err == nil {
					_, _ = c.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: name, AccessKeyId: k.AccessKey.AccessKeyId})
				}
				_, _ = c.DeleteUser(ctx, &iam.DeleteUserInput{UserName: name})
			}
		})
	}
	var pages, failed atomic.Int64
	var first atomic.Value
	var listers sync.WaitGroup
	for range 4 {
		listers.Go(func() {
			c := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: IAMRegion, BaseEndpoint: aws.String(srv.IAMEndpoint()), Credentials: creds, Retryer: aws.NopRetryer{}})
			for pages.Load() < 400 && ctx.Err() == nil {
				p := iam.NewListUsersPaginator(c, &iam.ListUsersInput{MaxItems: aws.Int32(100)})
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
	churn.Wait()
	if n := failed.Load(); n > 0 {
		msg, _ := first.Load().(string)
		t.Errorf("%d of %d pages failed; the first: %s", n, pages.Load(), msg)
	}
	if pages.Load() < 100 {
		t.Errorf("%d pages listed, want 100 at least", pages.Load())
	}
}
