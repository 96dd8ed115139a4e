package s3gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
)

// Limits of the public listeners. A client must send its request header
// within headerTimeout of connecting, and its body within bodyTimeout plus
// a second per minBodyRate bytes of its Content-Length (unknownBodyTimeout
// when the length is not given: a chunked body); a response must be taken
// within iamWriteTimeout on the IAM listener (its answers are small; S3
// downloads may be any size, so the S3 listener has no such limit). The
// connection limits are Config's; a connection beyond them is answered 503
// and closed.
const (
	headerTimeout      = 10 * time.Second
	bodyTimeout        = 30 * time.Second
	minBodyRate        = 64 << 10 // bytes per second
	unknownBodyTimeout = time.Hour
	iamWriteTimeout    = time.Minute
	// idleTimeout bounds the wait for a next request on a kept-alive
	// connection; neither listener keeps connections alive today.
	idleTimeout = 2 * time.Minute

	// DefaultS3MaxConnections and DefaultIAMMaxConnections are the
	// public listeners' connection limits when Config leaves them 0.
	DefaultS3MaxConnections  = 4096
	DefaultIAMMaxConnections = 1024
	// ownMaxConnections is the connection limit of each listener of this
	// process's own calls: far above what its driver has in flight.
	ownMaxConnections = 256
	// ownListen is where the listeners of this process's own calls are
	// opened: loopback, a port of their own, which a Service does not
	// expose.
	ownListen = "127.0.0.1:0"
	// ownShutdownTimeout bounds the drain of those listeners at Stop.
	ownShutdownTimeout = 9 * time.Second
)

// bodyDeadline gives a request whose header was read the time to send its
// body: fasthttp's HeaderReceived, which sets the connection's read
// deadline again. Without it the header's deadline would also end the
// body, cutting any upload that takes longer than headerTimeout.
func bodyDeadline(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	n := h.ContentLength()
	switch {
	case n == -1: // chunked
		return fasthttp.RequestConfig{ReadTimeout: unknownBodyTimeout}
	case n < 0: // no body
		n = 0
	}
	return fasthttp.RequestConfig{ReadTimeout: bodyTimeout + time.Duration(n/minBodyRate)*time.Second}
}

// harden sets the public server's limits. versitygw configures neither
// timeouts nor a per-listener limit and has no option for them, so they
// are set on its fasthttp server before it serves (an OnListen hook runs
// in the serving goroutine just before Serve).
func harden(srv *fasthttp.Server, maxConns int, writeTimeout time.Duration) {
	srv.Concurrency = maxConns
	// A client cut for its slowness is answered 408 quietly: versitygw's
	// error handler would print an internal error for each, a line an
	// attacker could make by the thousand.
	onError := srv.ErrorHandler
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			ctx.Error(fasthttp.StatusMessage(fasthttp.StatusRequestTimeout), fasthttp.StatusRequestTimeout)
			return
		}
		onError(ctx, err)
	}
	srv.ReadTimeout = headerTimeout
	srv.HeaderReceived = bodyDeadline
	srv.WriteTimeout = writeTimeout
	srv.IdleTimeout = idleTimeout
}

// ownPath is the listener of this process's own calls to one versitygw
// server: a loopback port of its own, served by a fasthttp server of its
// own around the public server's handler. Its connections do not count
// against the public listener's limit, so no public client, however many
// connections it holds, can make the broker's calls fail. versitygw's
// in-flight request limit, which the two share, is set to the sum of both
// connection limits, and a connection carries one request at a time.
type ownPath struct {
	ln net.Listener

	mu      sync.Mutex
	srv     *fasthttp.Server
	err     error      // why start failed
	served  chan error // Serve's return, once started
	stopped bool
}

func openOwnPath() (*ownPath, error) {
	ln, err := net.Listen("tcp", ownListen)
	if err != nil {
		return nil, fmt.Errorf("listen for the own calls: %w", err)
	}
	return &ownPath{ln: ln}, nil
}

func (o *ownPath) addr() string { return o.ln.Addr().String() }

// start hardens the public server of versitygw's server (an
// *s3api.S3ApiServer or *iamapi.IAMApiServer) and serves its handler on the
// own listener. It runs in versitygw's OnListen hook, before the public
// server serves.
func (o *ownPath) start(server any, maxConns int, writeTimeout time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopped || o.srv != nil {
		return
	}
	app, err := fiberApp(server)
	if err != nil {
		o.err = err
		return
	}
	pub := app.Server()
	o.srv = &fasthttp.Server{
		Handler:                       pub.Handler,
		ErrorHandler:                  pub.ErrorHandler,
		Name:                          pub.Name,
		Logger:                        pub.Logger,
		Concurrency:                   ownMaxConnections,
		DisableKeepalive:              pub.DisableKeepalive,
		MaxRequestBodySize:            pub.MaxRequestBodySize,
		ReadBufferSize:                pub.ReadBufferSize,
		WriteBufferSize:               pub.WriteBufferSize,
		StreamRequestBody:             pub.StreamRequestBody,
		NoDefaultServerHeader:         pub.NoDefaultServerHeader,
		NoDefaultDate:                 pub.NoDefaultDate,
		NoDefaultContentType:          pub.NoDefaultContentType,
		DisableHeaderNamesNormalizing: pub.DisableHeaderNamesNormalizing,
		DisablePreParseMultipartForm:  pub.DisablePreParseMultipartForm,
		ReduceMemoryUsage:             pub.ReduceMemoryUsage,
		GetOnly:                       pub.GetOnly,
	}
	// The same timeouts: a client that connects and sends nothing (Go's
	// transport keeps a connection whose request was canceled while it
	// dialed) would otherwise hold Stop for the whole drain timeout, as
	// a connection counts as active from its accept until its first
	// request is answered.
	harden(o.srv, ownMaxConnections, writeTimeout)
	harden(pub, maxConns, writeTimeout)
	o.served = make(chan error, 1)
	srv, ln := o.srv, o.ln
	go func() { o.served <- srv.Serve(ln) }()
}

// ready reports why start failed, or that it has not run.
func (o *ownPath) ready() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.err != nil:
		return o.err
	case o.srv == nil:
		return errors.New("the listener of the own calls is not served yet")
	}
	return nil
}

// shutdown stops the own listener's server, waiting for its requests (at
// most ownShutdownTimeout), or closes the listener if it was never served.
func (o *ownPath) shutdown() error {
	o.mu.Lock()
	o.stopped = true
	srv := o.srv
	o.mu.Unlock()
	if srv == nil {
		return o.ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), ownShutdownTimeout)
	defer cancel()
	err := srv.ShutdownWithContext(ctx)
	if serr := <-o.served; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("stop the listener of the own calls: %w", err)
	}
	return nil
}

// fiberApp returns the fiber app of a versitygw server. versitygw keeps it
// in an unexported field, app, and offers no way to serve it on a listener
// of one's own or to set its server's timeouts; TestFiberApp fails when a
// versitygw update moves it.
func fiberApp(server any) (*fiber.App, error) {
	v := reflect.ValueOf(server)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("find the fiber app of %T: not a pointer to a struct", server)
	}
	f := v.Elem().FieldByName("app")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*fiber.App]() {
		return nil, fmt.Errorf("find the fiber app of %T: no field app of type *fiber.App", server)
	}
	app := *(**fiber.App)(unsafe.Pointer(f.UnsafeAddr())) //nolint:gosec // reads a field versitygw does not export (see above)
	if app == nil {
		return nil, fmt.Errorf("find the fiber app of %T: not created", server)
	}
	return app, nil
}
