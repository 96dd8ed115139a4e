package harness

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestFreeAddrOncePerBinary draws many more addresses than a random draw
// could give without a repeat (400 of 8,768 ports: a repeat is all but
// certain), as a package of crash cells does over its run.
func TestFreeAddrOncePerBinary(t *testing.T) {
	seen := map[string]int{}
	for i := range 400 {
		addr := FreeAddr(t)
		if j, ok := seen[addr]; ok {
			t.Fatalf("draw %d handed out %s again (first at draw %d)", i, addr, j)
		}
		seen[addr] = i
		_, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); p < portMin || p >= portMax {
			t.Fatalf("draw %d: port %d outside [%d, %d)", i, p, portMin, portMax)
		}
	}
}

// TestFreeAddrAcrossBinaries runs this test binary again as a child that
// draws ports and stays alive, as a package running beside this one does:
// none of its ports may be reserved here while it lives, and each may be
// once it has exited.
func TestFreeAddrAcrossBinaries(t *testing.T) {
	if os.Getenv("HARNESS_PORTS_CHILD") != "" {
		for range 20 {
			_, port, _ := net.SplitHostPort(FreeAddr(t))
			os.Stdout.WriteString(port + "\n")
		}
		os.Stdout.WriteString("done\n")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFreeAddrAcrossBinaries$")
	cmd.Env = append(os.Environ(), "HARNESS_PORTS_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	var ports []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		p, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("child printed %q", sc.Text())
		}
		ports = append(ports, p)
	}
	if len(ports) != 20 {
		t.Fatalf("child drew %d ports, want 20 (%v)", len(ports), sc.Err())
	}
	for _, p := range ports {
		if ok, err := reservePort(p); err != nil || ok {
			t.Fatalf("reservePort(%d) = %v, %v while the child that drew it lives, want false", p, ok, err)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	for _, p := range ports {
		if ok, err := reservePort(p); err != nil || !ok {
			t.Fatalf("reservePort(%d) = %v, %v after the child exited, want true", p, ok, err)
		}
	}
}
