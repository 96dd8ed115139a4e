package adminapi

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/secure-io/sio-go"
)

func TestSealDecryptRoundTrip(t *testing.T) {
	// Each algorithm once, with a body of more than one sio fragment;
	// then the body sizes around the fragment size, with the cheap key
	// derivation (an Argon2id one takes 64 MiB and, under the race
	// detector, seconds).
	tests := map[string]struct {
		alg   byte
		sizes []int
	}{
		"Argon2idAESGCM":           {algArgon2idAESGCM, []int{sio.BufSize + 1}},
		"Argon2idChaCha20Poly1305": {algArgon2idChaCha20Poly1305, []int{sio.BufSize + 1}},
		"PBKDF2AESGCM":             {algPBKDF2AESGCM, []int{0, 1, sio.BufSize - 1, sio.BufSize, sio.BufSize + 1, 3*sio.BufSize + 5}},
	}
	secret := "s3cr3t-key-of-the-admin"
	salt, nonce := bytes.Repeat([]byte{7}, saltLen), bytes.Repeat([]byte{9}, nonceLen)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, size := range tc.sizes {
				plaintext := make([]byte, size)
				for i := range plaintext {
					plaintext[i] = byte(i*31 + 7)
				}
				sealed, err := seal(secret, tc.alg, salt, nonce, plaintext)
				if err != nil {
					t.Fatalf("seal %d bytes: %v", size, err)
				}
				if !bytes.Equal(sealed[:saltLen], salt) || sealed[saltLen] != tc.alg || !bytes.Equal(sealed[saltLen+1:headerLen], nonce) {
					t.Fatalf("seal %d bytes: header %x, want salt, id %#x, nonce", size, sealed[:headerLen], tc.alg)
				}
				if size >= 16 && bytes.Contains(sealed, plaintext) {
					t.Fatalf("seal %d bytes: the plaintext is in the output", size)
				}
				got, err := decrypt(secret, sealed)
				if err != nil {
					t.Fatalf("decrypt %d bytes: %v", size, err)
				}
				if !bytes.Equal(got, plaintext) {
					t.Fatalf("decrypt %d bytes: got %d different bytes", size, len(got))
				}
			}
		})
	}
}

func TestEncryptFreshSaltAndNonce(t *testing.T) {
	a, err := encrypt("secret-one", []byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := encrypt("secret-one", []byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	if a[saltLen] != algArgon2idAESGCM {
		t.Errorf("encrypt uses algorithm %#x, want %#x (Argon2id, AES-256-GCM)", a[saltLen], algArgon2idAESGCM)
	}
	if bytes.Equal(a[:saltLen], b[:saltLen]) || bytes.Equal(a[saltLen+1:headerLen], b[saltLen+1:headerLen]) {
		t.Errorf("two encryptions share a salt or a nonce")
	}
}

func TestDecryptRefuses(t *testing.T) {
	secret := "the-right-secret"
	good, err := encrypt(secret, []byte(`{"secretKey":"x","status":"enabled"}`))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	tests := map[string]struct {
		reason string
		secret string
		data   []byte
		want   string
	}{
		"WrongSecret": {
			reason: "a body encrypted with another secret key must not decrypt",
			secret: "another-secret", data: good, want: "not authentic",
		},
		"AlteredCiphertext": {
			reason: "a changed byte of the stream must be detected",
			secret: secret, data: flip(len(good) - 1), want: "not authentic",
		},
		"AlteredSalt": {
			reason: "a changed salt derives another key",
			secret: secret, data: flip(0), want: "not authentic",
		},
		"AlteredNonce": {
			reason: "a changed nonce must be detected",
			secret: secret, data: flip(saltLen + 1), want: "not authentic",
		},
		"Truncated": {
			reason: "a stream cut short must not pass as a shorter body",
			secret: secret, data: good[:len(good)-1], want: "not authentic",
		},
		"ShortHeader": {
			reason: "fewer bytes than the header is named as such",
			secret: secret, data: good[:headerLen-1], want: "shorter than the 41-byte header",
		},
		"UnknownAlgorithm": {
			reason: "an algorithm id outside the three is refused by name",
			secret: secret, data: func() []byte { b := bytes.Clone(good); b[saltLen] = 3; return b }(),
			want: "unknown encryption algorithm id 0x03",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decrypt(tc.secret, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s\ndecrypt: got %q, %v; want an error containing %q", tc.reason, got, err, tc.want)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error names the secret key")
			}
		})
	}
}

// TestDecryptServerVector decrypts an answer a MinIO server encrypted: the
// list-users answer of a server whose root secret key was
// vectorSecret, holding one user, vectoruser, with the built-in policy
// readwrite (captured once from the server hack/minio.sh builds). It keeps
// the format checked where no server runs; TestServerUserLifecycle checks
// it both ways against a live one.
func TestDecryptServerVector(t *testing.T) {
	const vectorSecret = "adminapi-test-vector-secret"
	const want = `{"vectoruser":{"policyName":"readwrite","status":"enabled","updatedAt":"2026-12-02T15:05:06.80503326Z"}}`
	data, err := os.ReadFile("testdata/list-users.enc")
	if err != nil {
		t.Fatal(err)
	}
	if data[saltLen] != algArgon2idAESGCM {
		t.Fatalf("vector uses algorithm %#x, want %#x", data[saltLen], algArgon2idAESGCM)
	}
	got, err := decrypt(vectorSecret, data)
	if err != nil {
		t.Fatalf("decrypt: %v", err)
	}
	if string(got) != want {
		t.Errorf("decrypt:\n got %s\nwant %s", got, want)
	}
	if _, err := decrypt("not-"+vectorSecret, data); err == nil {
		t.Errorf("decrypt with another secret key succeeded")
	}
}
