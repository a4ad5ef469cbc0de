//go:build unix

package llamacpptest_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

const gib = 1 << 30

func newProcFake(t *testing.T, opts llamacpptest.Options) (*llamacpptest.Server, *gputest.GPU) {
	t.Helper()
	opts.Processes = t
	opts.ModelBytes = 4 * gib
	return newFake(t, opts)
}

func refuses(url string) bool {
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err == nil {
		c.Close()
	}
	return err != nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// Each loaded model is a child llama-server of the router, charged to
// the GPU from its spawn. The unload answers at once; the status turns
// unloaded only once the child has exited, its charge with it.
func TestProcessesUnloadTurnsAtTheChildsExit(t *testing.T) {
	srv, gpu := newProcFake(t, llamacpptest.Options{})
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %+v", a)
	}
	c := srv.Child(qwen)
	if c == nil {
		t.Fatal("no child process")
	}
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tb.Get(int32(c.PID())); !ok || int(p.PPID) != srv.Front().PID() || gpu.Used() != 4*gib {
		t.Fatalf("child %+v %v, used %d: want a child of the router %d, charged", p, ok, gpu.Used(), srv.Front().PID())
	}
	wantAnswer(t, "unload", post(t, srv, "/models/unload", modelBody(qwen)), 200, `{"success":true}`)
	waitEvent(t, gpu, "exit "+qwen)
	if !closed(c.Exited()) || srv.Status(qwen) != "unloaded" {
		t.Fatalf("at the unload's end: exited %v, status %q", closed(c.Exited()), srv.Status(qwen))
	}
	if gpu.Users("llamacpp") != 0 || gpu.Used() != 0 {
		t.Fatalf("after the exit: users %d used %d", gpu.Users("llamacpp"), gpu.Used())
	}
}

// A killed router refuses at once; its loaded child exits at once (its
// standard input closed), while one still loading lives, charged, until
// its load has ended. A restarted router lists both unloaded. The load
// outlasts the wait for the loaded child's exit by far, even on a busy
// machine.
func TestProcessesKilledRouter(t *testing.T) {
	srv, gpu := newProcFake(t, llamacpptest.Options{LoadDelays: map[string]time.Duration{gemma: 2 * time.Second}})
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %+v", a)
	}
	loaded := srv.Child(qwen)
	wantAnswer(t, "load", post(t, srv, "/models/load", modelBody(gemma)), 200, `{"success":true}`)
	loading := srv.Child(gemma)
	if loading == nil || srv.Status(gemma) != "loading" {
		t.Fatalf("%s: %q, want loading", gemma, srv.Status(gemma))
	}
	front := srv.Front().PID()
	srv.Kill()
	if !refuses(srv.URL()) {
		t.Fatal("the killed router's port accepts")
	}
	waitClosed(t, loaded.Exited(), "exit of the loaded child")
	if closed(loading.Exited()) || gpu.Users("llamacpp") != 1 || gpu.Used() != 4*gib {
		t.Fatalf("the loading child: exited %v, users %d, used %d; want alive and charged",
			closed(loading.Exited()), gpu.Users("llamacpp"), gpu.Used())
	}
	srv.Restart()
	if srv.Front().PID() == front {
		t.Fatal("the restart kept the PID")
	}
	for id, e := range listModels(t, srv) {
		if e.Status.Value != "unloaded" {
			t.Fatalf("restarted: %s is %q", id, e.Status.Value)
		}
	}
	waitClosed(t, loading.Exited(), "exit of the loading child at its load's end")
	waitEvent(t, gpu, "load "+gemma+" exit")
	if gpu.Used() != 0 {
		t.Fatalf("used %d after both children exited", gpu.Used())
	}
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 || srv.Child(qwen) == nil {
		t.Fatalf("chat through the restarted router: %+v", a)
	}
}

// An unload of a child still loading kills it at once: failed, exit 1.
func TestProcessesUnloadWhileLoadingKills(t *testing.T) {
	srv, gpu := newProcFake(t, llamacpptest.Options{LoadDelay: time.Hour})
	post(t, srv, "/models/load", modelBody(qwen))
	c := srv.Child(qwen)
	post(t, srv, "/models/unload", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "unloaded")
	e := listModels(t, srv)[qwen]
	if !closed(c.Exited()) || e.Status.Failed == nil || !*e.Status.Failed || gpu.Used() != 0 {
		t.Fatalf("killed while loading: exited %v, %+v, used %d", closed(c.Exited()), e.Status, gpu.Used())
	}
}
