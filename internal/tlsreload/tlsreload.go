package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
)

// Reloader holds the certificate loaded from CertFile and KeyFile and
// reloads it when the files change.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	cert   *tls.Certificate
	loaded [2]fs.FileInfo // the files cert was loaded from
	failed [2]fs.FileInfo // the files that last failed to load
}

// New loads the pair and returns a Reloader serving it. log receives each
// reload and each pair that fails to load; nil means slog.Default().
func New(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log}
	st, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := load(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.loaded = cert, st
	return r, nil
}

// Config returns a server TLS configuration that serves the current
// certificate, TLS 1.2 and newer.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// GetCertificate returns the certificate to serve, reloading the files
// first if they changed since the last load (see the package comment).
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.stat()
	if err != nil {
		// The files are being replaced, or gone: keep serving what
		// was loaded, as with a pair that does not load.
		return r.cert, nil
	}
	if same(st, r.loaded) || same(st, r.failed) {
		return r.cert, nil
	}
	cert, err := load(r.certFile, r.keyFile)
	if err != nil {
		r.failed = st
		r.log.Warn("Keeping the current TLS certificate: the changed files do not load", "cert_file", r.certFile, "key_file", r.keyFile, "error", err)
		return r.cert, nil
	}
	r.cert, r.loaded, r.failed = cert, st, [2]fs.FileInfo{}
	r.log.Info("Reloaded the TLS certificate", "cert_file", r.certFile, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	return r.cert, nil
}

func (r *Reloader) stat() ([2]fs.FileInfo, error) {
	var st [2]fs.FileInfo
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return st, fmt.Errorf("TLS file: %w", err)
		}
		st[i] = fi
	}
	return st, nil
}

func same(a, b [2]fs.FileInfo) bool {
	for i := range a {
		if a[i] == nil || b[i] == nil || !os.SameFile(a[i], b[i]) ||
			a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return false
		}
	}
	return true
}

func load(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil { // filled in by LoadX509KeyPair since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("load TLS certificate %s: %w", certFile, err)
		}
	}
	return &cert, nil
}
