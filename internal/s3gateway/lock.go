package s3gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrDataDirInUse is returned by Start when another process (or another
// Server of this one) runs on the same data directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockFile is the file under the data directory whose lock a running
// server holds.
const lockFile = ".lock"

// lockDataDir takes an exclusive, non-blocking flock on dir's lock file and
// returns the open file that holds it; closing it (or the process ending,
// kill -9 included) releases the lock. Two servers on one data directory
// would each index the IAM store at start and write it without seeing the
// other's users and keys: the next start would find a user stored twice.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is used by another running bucketbroker (serve, controller or admin audit)", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	return f, nil
}
