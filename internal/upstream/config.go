package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// File is an upstream configuration file (YAML or JSON): a list of
// upstream brokers.
type File struct {
	Upstreams []FileEntry `json:"upstreams"`
}

// FileEntry is one upstream in a File. Its password never sits in the file
// itself: it is read from PasswordFile or from the environment variable
// PasswordEnv.
type FileEntry struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Username is the upstream's basic-auth user.
	Username string `json:"username,omitempty"`
	// PasswordFile is a file holding the password (one line; a trailing
	// newline is dropped).
	PasswordFile string `json:"passwordFile,omitempty"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `json:"passwordEnv,omitempty"`
	TLS         struct {
		CAFile             string `json:"caFile,omitempty"`
		ServerName         string `json:"serverName,omitempty"`
		InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	} `json:"tls,omitzero"`
	// Services and Plans keep only the services and plans they name, by
	// id or name (empty: all).
	Services []string `json:"services,omitempty"`
	Plans    []string `json:"plans,omitempty"`
	// Timeout bounds each request to the upstream (default 60s), as a Go
	// duration ("30s").
	Timeout string `json:"timeout,omitempty"`
}

// LoadFile reads an upstream configuration file.
func LoadFile(path string) ([]Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read upstream config: %w", err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("upstream config %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("upstream config %s: %w", path, err)
	}
	if len(f.Upstreams) == 0 {
		return nil, fmt.Errorf("upstream config %s: no upstreams", path)
	}
	out := make([]Config, 0, len(f.Upstreams))
	for i, e := range f.Upstreams {
		c, err := e.config()
		if err != nil {
			return nil, fmt.Errorf("upstream config %s: upstream %d (%q): %w", path, i+1, e.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (e FileEntry) config() (Config, error) {
	c := Config{Name: e.Name, Services: e.Services, Plans: e.Plans, Client: osbclient.Config{
		URL: e.URL, Username: e.Username,
		TLS: osbclient.TLSOptions{CAFile: e.TLS.CAFile, ServerName: e.TLS.ServerName, InsecureSkipVerify: e.TLS.InsecureSkipVerify},
	}}
	if e.URL == "" {
		return c, errors.New("url is required")
	}
	switch {
	case e.PasswordFile != "" && e.PasswordEnv != "":
		return c, errors.New("passwordFile and passwordEnv: give one")
	case e.PasswordFile != "":
		b, err := os.ReadFile(e.PasswordFile)
		if err != nil {
			return c, fmt.Errorf("read passwordFile: %w", err)
		}
		c.Client.Password = strings.TrimRight(string(b), "\r\n")
	case e.PasswordEnv != "":
		v, ok := os.LookupEnv(e.PasswordEnv)
		if !ok {
			return c, fmt.Errorf("passwordEnv: %s is not set", e.PasswordEnv)
		}
		c.Client.Password = v
	}
	if e.Timeout != "" {
		d, err := time.ParseDuration(e.Timeout)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("timeout %q: want a positive duration such as 30s", e.Timeout)
		}
		c.Client.Timeout = d
	}
	return c, nil
}

// ParseFlag reads a --upstream NAME=URL flag. The basic-auth credentials
// come from the environment, never from the command line:
// BUCKETBROKER_UPSTREAM_<NAME>_USERNAME and ..._PASSWORD, NAME in upper
// case with hyphens as underscores.
func ParseFlag(v string) (Config, error) {
	name, u, ok := strings.Cut(v, "=")
	if !ok || name == "" || u == "" {
		return Config{}, fmt.Errorf("--upstream %q: want NAME=URL", v)
	}
	prefix := EnvPrefix(name)
	return Config{Name: name, Client: osbclient.Config{URL: u,
		Username: os.Getenv(prefix + "USERNAME"), Password: os.Getenv(prefix + "PASSWORD")}}, nil
}

// EnvPrefix starts the names of the environment variables that hold the
// credentials of a --upstream flag's upstream.
func EnvPrefix(name string) string {
	return "BUCKETBROKER_UPSTREAM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
}
