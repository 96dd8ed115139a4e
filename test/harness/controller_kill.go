package harness

import (
	"fmt"
	"time"
)

// Kill kills the controller with SIGKILL, as an OOM killer or a node
// failure would, and waits until it is gone. Nothing of the process runs
// after the signal: no deferred function, no graceful shutdown, no last
// status write. TryStart starts it again on the same data dir and ports.
func (c *Controller) Kill() {
	if c.cmd == nil {
		return
	}
	fmt.Fprintf(c.log, "=== kill -9 %s\n", time.Now().Format(time.StampMilli))
	_ = c.cmd.Process.Kill()
	noteExit(c.log, <-c.exited)
	c.cmd = nil
}
