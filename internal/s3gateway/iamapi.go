package s3gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/versity/versitygw/iamapi"
	"github.com/versity/versitygw/iamapi/private"
)

// iamConfig is what runIAMAPI needs.
type iamConfig struct {
	rootAccess, rootSecret string
	addr                   string // public IAM API, host:port
	socket                 string // private API for the gateway, a unix socket path
	store                  *userStore
	// maxConns is the public listener's connection limit; own serves
	// this process's own calls (listeners.go).
	maxConns int
	own      *ownPath
}

// runIAMAPI serves versitygw's IAM API and its private API (signature
// checks and policy evaluation for the gateway) on an open userStore, until ctx
// ends. It does what embedgw.RunIAMAPI does for a file store with the
// options Start used there, except that RunIAMAPI can only build the store
// itself, and its file store costs time in proportion to the number of
// users (see userStore).
func runIAMAPI(ctx context.Context, cfg iamConfig) error {
	store := cfg.store
	root := iamapi.RootCredentials{Access: cfg.rootAccess, Secret: cfg.rootSecret}
	// Keep-alive stays off, as versitygw has it by default, here and on the
	// S3 listener: with it on, after a client had many connections open at
	// once, Stop waited out the servers' 10 s shutdown timeout in most runs
	// and then failed (TestStopAfterManyConnections); the connection it
	// saves costs under a millisecond on loopback.
	// The in-flight limit is shared by the public listener and the own
	// calls' listener, so it is the sum of their connection limits.
	limit := cfg.maxConns + ownMaxConnections
	var public *iamapi.IAMApiServer
	public, err := iamapi.New(store, root,
		iamapi.WithConcurrencyLimiter(limit, limit),
		iamapi.WithOnListen(func() { cfg.own.start(public, cfg.maxConns, iamWriteTimeout) }),
		iamapi.WithQuiet())
	if err != nil {
		return errors.Join(fmt.Errorf("init IAM API: %w", err), cfg.own.shutdown())
	}
	priv, err := private.New(store, root, private.WithPrivateQuiet())
	if err != nil {
		return errors.Join(fmt.Errorf("init private IAM API: %w", err), cfg.own.shutdown())
	}

	errs := make(chan error, 2)
	go func() { errs <- public.ServeMultiPort([]string{cfg.addr}) }()
	go func() { errs <- servePlain(priv.ServeMultiPort, []string{cfg.socket}) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errs:
	}
	// The own calls' listener first: it serves the public server's handler.
	return errors.Join(err, cfg.own.shutdown(), public.Shutdown(), priv.Shutdown())
}

// servePlain calls a ServeMultiPort whose TLS options are of a type
// versitygw keeps internal, with none: the private API then serves unix
// sockets only, and refuses any other address.
func servePlain[T any](serve func([]string, T) error, addrs []string) error {
	var none T
	return serve(addrs, none)
}
