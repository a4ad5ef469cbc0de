package procs

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	gnet "github.com/shirou/gopsutil/v4/net"
)

func TestTableTreeAndSession(t *testing.T) {
	tb := NewTable([]Proc{
		{ID: ID{PID: 1, Start: 10}},
		{ID: ID{PID: 100, Start: 20}, PPID: 1, Session: 100},
		{ID: ID{PID: 101, Start: 21}, PPID: 100, Session: 100},
		{ID: ID{PID: 102, Start: 22}, PPID: 101, Session: 100},
		{ID: ID{PID: 200, Start: 30}, PPID: 1, Session: 100}, // an orphan of 100's session
		{ID: ID{PID: 300, Start: 40}, PPID: 1, Session: 300},
	})
	pids := func(ps []Proc) []int32 {
		var out []int32
		for _, p := range ps {
			out = append(out, p.PID)
		}
		return out
	}
	if got := pids(tb.Tree(100)); !slices.Equal(got, []int32{100, 101, 102}) {
		t.Errorf("Tree(100) = %v", got)
	}
	if got := pids(tb.Descendants(100)); !slices.Equal(got, []int32{101, 102}) {
		t.Errorf("Descendants(100) = %v", got)
	}
	if got := tb.Tree(999); got != nil {
		t.Errorf("Tree of a missing PID = %v", got)
	}
	if got := pids(tb.InSession(100)); !slices.Equal(got, []int32{100, 101, 102, 200}) {
		t.Errorf("InSession(100) = %v", got)
	}
	if got := tb.InSession(0); got != nil {
		t.Errorf("InSession(0) = %v, want none", got)
	}
	for _, c := range []struct {
		id    ID
		alive bool
	}{
		{ID{100, 20}, true},
		{ID{100, 19}, false}, // the PID reused by another process
		{ID{999, 20}, false},
	} {
		if got := tb.Alive(c.id); got != c.alive {
			t.Errorf("Alive(%v) = %v, want %v", c.id, got, c.alive)
		}
	}
	if got := pids(tb.Left([]ID{{102, 22}, {200, 31}, {300, 40}})); !slices.Equal(got, []int32{102, 300}) {
		t.Errorf("Left = %v", got)
	}
}

func TestListenersIn(t *testing.T) {
	conns := []gnet.ConnectionStat{
		{Status: "ESTABLISHED", Laddr: gnet.Addr{Port: 8080}, Pid: 5},
		{Status: "LISTEN", Laddr: gnet.Addr{Port: 9090}, Pid: 6},
		{Status: "LISTEN", Laddr: gnet.Addr{Port: 9090}, Pid: 6}, // IPv4 and IPv6
		{Status: "LISTEN", Laddr: gnet.Addr{Port: 8080}, Pid: 0},
	}
	ls := listenersIn(conns, []int{8080, 9090, 7070})
	for _, c := range []struct {
		port int
		pid  int32
		l    Listening
	}{
		{8080, 0, Unseen}, // a listener whose socket is not ours to map
		{9090, 6, Seen},
		{7070, 0, Nobody},
	} {
		pid, l, err := listenerOf(ls[c.port])
		if err != nil || pid != c.pid || l != c.l {
			t.Errorf("port %d: %d %v %v, want %d %v", c.port, pid, l, err, c.pid, c.l)
		}
	}
	if len(ls[9090]) != 1 {
		t.Errorf("port 9090 listed %v, want its one process once", ls[9090])
	}
}

func TestSnapshotSeesThisProcessAndItsChild(t *testing.T) {
	ctx := context.Background()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to run: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	tb, err := Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	self, ok := tb.Get(int32(os.Getpid()))
	if !ok || self.Start <= 0 {
		t.Fatalf("this process not in the table: %+v %v", self, ok)
	}
	child, ok := tb.Get(int32(cmd.Process.Pid))
	if !ok || child.PPID != self.PID {
		t.Fatalf("child %d: %+v %v, want parent %d", cmd.Process.Pid, child, ok, self.PID)
	}
	if runtime.GOOS == "linux" && child.Session != self.Session {
		t.Errorf("child's session %d, want its parent's %d", child.Session, self.Session)
	}
	if !slices.ContainsFunc(tb.Descendants(self.PID), func(p Proc) bool { return p.PID == child.PID }) {
		t.Error("the child is not among this process's descendants")
	}
	cmd.Process.Kill()
	cmd.Wait()
	after, err := Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Alive(child.ID) {
		t.Fatal("a killed and reaped child is still alive")
	}
	if !after.Alive(self.ID) {
		t.Fatal("this process is no longer alive")
	}
}

func TestListenerFindsThisProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	pid, l, err := Listener(context.Background(), port)
	if err != nil {
		t.Skipf("sockets not readable here: %v", err)
	}
	if l != Seen || pid != int32(os.Getpid()) {
		t.Fatalf("Listener(%d) = %d %v, want this process %d", port, pid, l, os.Getpid())
	}
	ln.Close()
	if _, l, err := Listener(context.Background(), port); err != nil || l != Nobody {
		t.Fatalf("after close: %v %v, want nobody", l, err)
	}
}
