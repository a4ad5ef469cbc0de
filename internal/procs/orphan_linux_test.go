package procs

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// An engine that dies leaves its model server behind, re-parented; its
// remembered ID stays alive, and the engine's session still finds it.
func TestOrphanKeepsItsIDAndSession(t *testing.T) {
	// The shell starts a sleeper in the background, prints its PID, and
	// exits when its standard input closes: the sleeper is orphaned.
	sh := exec.Command("sh", "-c", "sleep 30 & echo $!; read _; exit 0")
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	sid := int32(sh.Process.Pid) // Setsid: the shell leads its session
	before, err := Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	shell, ok := before.Get(sid)
	if !ok {
		t.Fatalf("the shell %d is not in the table", sid)
	}
	sleeper, ok := before.Get(int32(pid))
	if !ok || sleeper.Session != sid {
		t.Fatalf("sleeper %d: %+v %v, want session %d", pid, sleeper, ok, sid)
	}
	in.Close()
	if err := sh.Wait(); err != nil {
		t.Fatal(err)
	}
	after, err := Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !after.Alive(sleeper.ID) {
		t.Fatal("the orphan counts as gone")
	}
	if after.Alive(shell.ID) {
		t.Fatal("the dead shell counts as alive")
	}
	left := after.InSession(sid)
	if len(left) != 1 || left[0].PID != int32(pid) {
		t.Fatalf("session %d after the shell's death: %+v, want the orphan alone", sid, left)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}
