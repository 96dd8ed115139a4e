package secretbox

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key, created, err := LoadOrCreateKeyFile(filepath.Join(t.TempDir(), "d", "key"))
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKeyFile = %v, created=%v", err, created)
	}
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := b.Seal([]byte("top-secret"), "binding/a")
	s2, _ := b.Seal([]byte("top-secret"), "binding/a")
	if bytes.Equal(s1, s2) || bytes.Contains(s1, []byte("top-secret")) {
		t.Error("sealing must be randomized and must not contain the plaintext")
	}
	p, err := b.Open(s1, "binding/a")
	if err != nil || string(p) != "top-secret" {
		t.Errorf("Open = %q, %v", p, err)
	}
	if _, err := b.Open(s1, "binding/b"); err == nil {
		t.Error("Open with another record's context must fail")
	}
	s1[len(s1)-1] ^= 1
	if _, err := b.Open(s1, "binding/a"); err == nil {
		t.Error("Open of tampered data must fail")
	}
	other, _ := New(bytes.Repeat([]byte{7}, KeySize))
	if _, err := other.Open(s2, "binding/a"); err == nil {
		t.Error("Open with another key must fail")
	}
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	k1, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v, want 0600", fi.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Errorf("reload: created=%v err=%v same=%v", created, err, bytes.Equal(k1, k2))
	}
	if err := os.WriteFile(path, []byte("not base64!"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKeyFile(path); err == nil {
		t.Error("a corrupt key file must be an error, not replaced")
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("New with a short key must fail")
	}
}
