package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/pkg/provisioner"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (default: in-cluster)")
	name := flag.String("provisioner-name", "example.com/bucket", "StorageClass provisioner to serve")
	flag.Parse()
	if err := run(*kubeconfig, *name); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig) // in-cluster when empty
	if err != nil {
		return err
	}
	opts, err := provisioner.ManagerOptions(name)
	if err != nil {
		return err
	}
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	p, err := provisioner.New(newMemoryDriver(), provisioner.Options{
		Name: name, NamePrefix: "example", Host: "s3.example.com", Port: 443, Region: "us-east-1",
	})
	if err != nil {
		return err
	}
	if err := p.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// memoryDriver is a driver.Driver that keeps everything in memory. A real
// vendor's driver calls its storage system, following the same ownership
// rules (see pkg/driver).
type memoryDriver struct {
	mu      sync.Mutex
	buckets map[string]string   // name -> owner mark
	users   map[string]string   // name -> owner mark
	keys    map[string][]string // user -> access key ids
}

func newMemoryDriver() *memoryDriver {
	return &memoryDriver{buckets: map[string]string{}, users: map[string]string{}, keys: map[string][]string{}}
}

func (d *memoryDriver) EnsureBucket(_ context.Context, spec driver.BucketSpec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if owner, ok := d.buckets[spec.Name]; ok && owner != spec.Owner {
		return fmt.Errorf("bucket %q: %w", spec.Name, driver.ErrOwnedByOther)
	}
	d.buckets[spec.Name] = spec.Owner
	return nil
}

func (d *memoryDriver) DeleteBucket(_ context.Context, name, owner string, _ bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.buckets[name]; ok && o != owner {
		return fmt.Errorf("bucket %q: %w", name, driver.ErrOwnedByOther)
	}
	delete(d.buckets, name)
	return nil
}

func (d *memoryDriver) EnsureCredential(_ context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	if spec.Keys > driver.KeepOnlyKey || (spec.Keys == driver.KeepOnlyKey && spec.KeyID == "") {
		return driver.Credential{}, fmt.Errorf("key mode %d with key id %q: %w", spec.Keys, spec.KeyID, driver.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	o, exists := d.users[spec.UserName]
	if exists && o != spec.Owner {
		return driver.Credential{}, fmt.Errorf("user %q: %w", spec.UserName, driver.ErrOwnedByOther)
	}
	keys := d.keys[spec.UserName]
	if spec.Keys != driver.AddKey && spec.KeyID != "" && slices.Contains(keys, spec.KeyID) {
		d.keys[spec.UserName] = []string{spec.KeyID} // any other key is gone
		return driver.Credential{AccessKeyID: spec.KeyID}, nil
	}
	if spec.Keys == driver.KeepOnlyKey {
		return driver.Credential{}, fmt.Errorf("key %s of user %q: %w", spec.KeyID, spec.UserName, driver.ErrKeyGone)
	}
	if spec.Keys == driver.ReplaceKeys {
		keys = nil // any other key is gone
	}
	// AddKey keeps the others: this store has no limit on a user's keys.
	id, secret := randomHex(10), randomHex(20)
	d.users[spec.UserName] = spec.Owner
	d.keys[spec.UserName] = append(keys, id)
	return driver.Credential{AccessKeyID: id, SecretAccessKey: secret, NewUser: !exists}, nil
}

func (d *memoryDriver) RevokeCredential(_ context.Context, user, owner string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.users[user]; ok && o != owner {
		return fmt.Errorf("user %q: %w", user, driver.ErrOwnedByOther)
	}
	delete(d.users, user)
	delete(d.keys, user)
	return nil
}

func (d *memoryDriver) Observe(_ context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var o driver.Observation
	o.BucketOwner, o.BucketExists = d.buckets[req.Bucket]
	o.UserOwner, o.UserExists = d.users[req.UserName]
	o.KeyIDs = slices.Clone(d.keys[req.UserName])
	return o, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
