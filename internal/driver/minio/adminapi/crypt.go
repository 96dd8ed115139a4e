package adminapi

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/secure-io/sio-go"
	"golang.org/x/crypto/argon2"
)

// The layout of an encrypted body (see the package doc).
const (
	saltLen   = 32
	nonceLen  = 8
	headerLen = saltLen + 1 + nonceLen
	keyLen    = 32
)

// The algorithm ids: how the key is derived and which AEAD the stream uses.
const (
	algArgon2idAESGCM           byte = 0x00
	algArgon2idChaCha20Poly1305 byte = 0x01
	algPBKDF2AESGCM             byte = 0x02
)

// The key derivations' costs, fixed by the format: both ends must use the
// same.
const (
	argon2Time       = 1
	argon2MemoryKiB  = 64 * 1024
	argon2Threads    = 4
	pbkdf2Iterations = 8192
)

// kdfMu runs Argon2id derivations one at a time: each holds 64 MiB while it
// runs, and running them side by side would not make them finish sooner on
// a busy machine.
var kdfMu sync.Mutex

// encrypt encrypts plaintext for the server with the admin's secret key,
// under a fresh random salt and nonce, with AES-256-GCM and an Argon2id
// key.
func encrypt(secret string, plaintext []byte) ([]byte, error) {
	var salt [saltLen]byte
	var nonce [nonceLen]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, fmt.Errorf("random salt: %w", err)
	}
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("random nonce: %w", err)
	}
	return seal(secret, algArgon2idAESGCM, salt[:], nonce[:], plaintext)
}

// seal encrypts plaintext with the given algorithm, salt and nonce: the
// deterministic part of encrypt, which the tests call with each algorithm.
func seal(secret string, alg byte, salt, nonce, plaintext []byte) ([]byte, error) {
	stream, err := newStream(secret, alg, salt)
	if err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(make([]byte, 0, headerLen+len(plaintext)+int(stream.Overhead(int64(len(plaintext))))))
	out.Write(salt)
	out.WriteByte(alg)
	out.Write(nonce)
	w := stream.EncryptWriter(out, nonce, nil)
	if _, err := w.Write(plaintext); err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return out.Bytes(), nil
}

// decrypt decrypts a body the server encrypted with the admin's secret key.
func decrypt(secret string, data []byte) ([]byte, error) {
	if len(data) < headerLen {
		return nil, fmt.Errorf("decrypt: %d bytes, shorter than the %d-byte header", len(data), headerLen)
	}
	salt, alg, nonce := data[:saltLen], data[saltLen], data[saltLen+1:headerLen]
	stream, err := newStream(secret, alg, salt)
	if err != nil {
		return nil, err
	}
	plaintext, err := io.ReadAll(stream.DecryptReader(bytes.NewReader(data[headerLen:]), nonce, nil))
	if errors.Is(err, sio.NotAuthentic) {
		return nil, errors.New("decrypt: not authentic (encrypted with another secret key, or altered)")
	}
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	return plaintext, nil
}

// newStream is the sio stream of algorithm alg, its key derived from the
// secret key and salt.
func newStream(secret string, alg byte, salt []byte) (*sio.Stream, error) {
	var (
		stream *sio.Stream
		err    error
	)
	switch alg {
	case algArgon2idAESGCM:
		stream, err = sio.AES_256_GCM.Stream(argon2Key(secret, salt))
	case algArgon2idChaCha20Poly1305:
		stream, err = sio.ChaCha20Poly1305.Stream(argon2Key(secret, salt))
	case algPBKDF2AESGCM:
		var key []byte
		key, err = pbkdf2.Key(sha256.New, secret, salt, pbkdf2Iterations, keyLen)
		if err == nil {
			stream, err = sio.AES_256_GCM.Stream(key)
		}
	default:
		return nil, fmt.Errorf("unknown encryption algorithm id %#02x", alg)
	}
	if err != nil {
		return nil, fmt.Errorf("cipher: %w", err)
	}
	return stream, nil
}

func argon2Key(secret string, salt []byte) []byte {
	kdfMu.Lock()
	defer kdfMu.Unlock()
	return argon2.IDKey([]byte(secret), salt, argon2Time, argon2MemoryKiB, argon2Threads, keyLen)
}
