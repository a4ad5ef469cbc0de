package proctest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// backend is an in-process server; /stream sends one line, waits for
// release, then another.
func backend(t *testing.T, release <-chan struct{}) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fake", "yes")
		fmt.Fprint(w, "hello "+r.Method)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "second\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func get(t *testing.T, url string) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.Header
}

// refuses reports whether nothing listens on port.
func refuses(port int) bool {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		c.Close()
	}
	return err != nil
}

func alive(t *testing.T, pid int) (procs.Proc, bool) {
	t.Helper()
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tb.Get(int32(pid))
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// A killed front's port refuses at once; its child lives on, re-parented,
// listening and charged, until it is killed.
func TestKilledFrontLeavesItsChild(t *testing.T) {
	f := proctest.StartFront(t, backend(t, nil), proctest.FrontOptions{Setsid: true})
	if body, h := get(t, f.URL()+"/hello"); body != "hello GET" || h.Get("X-Fake") != "yes" {
		t.Fatalf("through the front: %q %v", body, h)
	}
	c, err := f.Spawn(proctest.ChildOptions{Setpgid: true, Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := alive(t, c.PID())
	if !ok || int(p.PPID) != f.PID() || p.Session != int32(f.PID()) || c.Holder() != c.PID() {
		t.Fatalf("child %+v %v, want a child of the front %d in its session", p, ok, f.PID())
	}
	if pid, l, err := procs.Listener(context.Background(), c.Port()); err == nil && (l != procs.Seen || int(pid) != c.PID()) {
		t.Fatalf("the child's port %d: %d %v", c.Port(), pid, l)
	}
	gpu := gputest.New()
	gpu.ChargeProcess("llamaswap", "load m", c.Holder(), 1<<30)
	front := f.PID()
	f.Kill()
	if !refuses(f.Port()) {
		t.Fatal("the killed front's port still accepts")
	}
	p, ok = alive(t, c.PID())
	if !ok || int(p.PPID) == front || closed(c.Exited()) {
		t.Fatalf("after the kill: child %+v %v", p, ok)
	}
	if gpu.Users("llamaswap") != 1 || gpu.Used() != 1<<30 {
		t.Fatal("the orphan's charge has ended")
	}
	c.Kill()
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "llamaswap", "load m exit") >= 0 }) {
		t.Fatalf("no exit:\n%s", gputest.Dump(gpu.Events()))
	}
}

// Terminate closes the port at once, drains the request in flight, then
// stops the children (their StopDelay), then the front exits.
func TestTerminateDrainsThenStopsChildren(t *testing.T) {
	release := make(chan struct{})
	f := proctest.StartFront(t, backend(t, release), proctest.FrontOptions{})
	c, err := f.Spawn(proctest.ChildOptions{Setpgid: true, StopDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(f.URL() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); line != "first\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	f.Terminate()
	if !refuses(f.Port()) {
		t.Fatal("the port accepts after SIGTERM")
	}
	if closed(c.Exited()) || closed(f.Exited()) {
		t.Fatal("the child or the front is gone before the drain")
	}
	close(release)
	if rest, err := io.ReadAll(rd); string(rest) != "second\n" || err != nil {
		t.Fatalf("the drained stream's end: %q %v", rest, err)
	}
	wait(t, c.Exited(), "child exit after the drain")
	wait(t, f.Exited(), "front exit")
}

// Restart: a new front on the same port, with no children; the old
// front's child lives on.
func TestRestartOrphansTheChildren(t *testing.T) {
	f := proctest.StartFront(t, backend(t, nil), proctest.FrontOptions{})
	c, err := f.Spawn(proctest.ChildOptions{Setpgid: true})
	if err != nil {
		t.Fatal(err)
	}
	old, port := f.PID(), f.Port()
	f.Restart()
	if f.PID() == old || f.Port() != port {
		t.Fatalf("restarted: pid %d port %d, was %d %d", f.PID(), f.Port(), old, port)
	}
	if body, _ := get(t, f.URL()+"/hello"); body != "hello GET" {
		t.Fatalf("through the new front: %q", body)
	}
	if closed(c.Exited()) {
		t.Fatal("the orphan died at the restart")
	}
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := tb.Descendants(int32(f.PID())); len(d) != 0 {
		t.Fatalf("the new front has children %+v", d)
	}
}

// A wrapper exits StopDelay after SIGTERM; its child, which holds the
// model, outlives it by Linger.
func TestWrapperChildOutlivesTheStop(t *testing.T) {
	f := proctest.StartFront(t, backend(t, nil), proctest.FrontOptions{})
	c, err := f.Spawn(proctest.ChildOptions{Setpgid: true, Wrapper: true, Listen: true, Linger: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if c.Holder() == c.PID() {
		t.Fatal("no wrapper")
	}
	h, ok := alive(t, c.Holder())
	if !ok || int(h.PPID) != c.PID() {
		t.Fatalf("holder %+v %v, want a child of the wrapper %d", h, ok, c.PID())
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if closed(c.HolderExited()) {
		t.Fatal("the holder exited with the wrapper")
	}
	wait(t, c.HolderExited(), "holder exit")
}

// With ExitOnStdinEOF, a child exits when its standard input closes, but
// only once its load has ended; a killed front closes it too.
func TestStdinEOFWaitsForTheLoad(t *testing.T) {
	f := proctest.StartFront(t, backend(t, nil), proctest.FrontOptions{})
	c, err := f.Spawn(proctest.ChildOptions{ExitOnStdinEOF: true, LoadFor: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	loading, err := f.Spawn(proctest.ChildOptions{ExitOnStdinEOF: true, LoadFor: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if closed(c.Exited()) {
		t.Fatal("exited during its load")
	}
	wait(t, c.Exited(), "exit after the load")
	f.Kill()
	wait(t, loading.Exited(), "exit of the orphan after its load")
}
