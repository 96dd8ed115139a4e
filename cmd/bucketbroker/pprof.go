package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// bindPprofFlag declares --pprof-listen, writing into addr.
func bindPprofFlag(f *pflag.FlagSet, addr *string) {
	f.StringVar(addr, "pprof-listen", "", "address of Go's profiling endpoints (/debug/pprof/), on a server of their own; empty: off. A host-less address (:6060) listens on loopback only: name a host (0.0.0.0:6060) to serve others")
}

// pprofAddress is the address --pprof-listen means: a missing host is
// loopback, so that profiles (which show code paths and can take CPU time)
// are not served to the network unless the operator says so.
func pprofAddress(flag string) (string, error) {
	host, port, err := net.SplitHostPort(flag)
	if err != nil {
		return "", fmt.Errorf("--pprof-listen %q: want host:port or :port: %w", flag, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// checkPprofFlag refuses a --pprof-listen that names no port, before
// anything starts.
func checkPprofFlag(flag string) error {
	if flag == "" {
		return nil
	}
	_, err := pprofAddress(flag)
	return err
}

// pprofServer serves net/http/pprof on its own mux and listener, apart
// from the OSB API, the metrics and the probes.
type pprofServer struct {
	server   *http.Server
	listener net.Listener
	done     chan struct{}
}

// startPprof listens on flag's address (see pprofAddress) and serves the
// profiling endpoints; an empty flag starts nothing and returns nil.
func startPprof(flag string, logger *slog.Logger) (*pprofServer, error) {
	if flag == "" {
		return nil, nil
	}
	addr, err := pprofAddress(flag)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for pprof on %s: %w", addr, err)
	}
	p := &pprofServer{listener: l, done: make(chan struct{}), server: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: a CPU profile or a trace runs for its ?seconds=.
		ErrorLog: log.New(httpErrorLog{logger}, "", 0),
	}}
	go func() {
		defer close(p.done)
		if err := p.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server stopped", "error", err)
		}
	}()
	logger.Info("Serving pprof", "address", "http://"+l.Addr().String()+"/debug/pprof/")
	return p, nil
}

// Addr is the address the server listens on.
func (p *pprofServer) Addr() net.Addr { return p.listener.Addr() }

// Stop stops the server; a nil server is stopped already.
func (p *pprofServer) Stop(ctx context.Context) error {
	if p == nil {
		return nil
	}
	err := p.server.Shutdown(ctx)
	<-p.done
	return err
}

// stopPprof stops p, giving a profile being written a few seconds.
func stopPprof(p *pprofServer, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		logger.Warn("Stopping the pprof server failed", "error", err)
	}
}

// httpErrorLog routes net/http's own messages through the logger.
type httpErrorLog struct{ log *slog.Logger }

func (l httpErrorLog) Write(p []byte) (int, error) {
	l.log.Warn("pprof server error", "error", string(p))
	return len(p), nil
}
