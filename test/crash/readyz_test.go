package crash

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestControllerReadyzFollowsBackend stops the controller's S3 + IAM
// backend under it: /readyz fails, naming the backend check, as serve's
// does, and is ready again once the backend is back.
func TestControllerReadyzFollowsBackend(t *testing.T) {
	v := startVersitygw(t)
	_, kubeconfig := claimAPIServer(t)
	c := harness.NewExternalController(t, binary, kubeconfig, "readyz.bucketbroker.io", v.backend())
	if err := c.TryStart(); err != nil { // waits for a ready /readyz
		t.Fatal(err)
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + c.ProbeAddr() + "/readyz?verbose")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	until := func(what string, ok func(int) bool) (int, string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, body := readyz()
			if ok(code) {
				return code, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz %s: still %d after 60s:\n%s", what, code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if code, body := readyz(); code != http.StatusOK || !strings.Contains(body, "[+]storage-backend ok") {
		t.Fatalf("/readyz with the backend up = %d, want 200 with the storage-backend check:\n%s", code, body)
	}
	if n, err := c.Metric("bucketbroker_build_info"); err != nil || n != 1 {
		t.Errorf("bucketbroker_build_info = %v, %v; want 1", n, err)
	}

	v.stop()
	_, body := until("with the backend down", func(code int) bool { return code != http.StatusOK && code != 0 })
	if !strings.Contains(body, "[-]storage-backend failed") {
		t.Errorf("/readyz with the backend down does not name the backend check:\n%s", body)
	}
	v.start()
	until("with the backend back", func(code int) bool { return code == http.StatusOK })
}
