//go:build unix

package vllmtest_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

const gib = 1 << 30

func newProcFake(t *testing.T) (*vllmtest.Server, *gputest.GPU) {
	t.Helper()
	return newFake(t, vllmtest.Options{Processes: t, ModelBytes: 8 * gib, SleepResidue: gib})
}

// The memory is the engine core's, a child of the API server started at
// launch; a sleep leaves its residue there, no occupancy, and the process
// stays; a wake charges it all again.
func TestProcessesEngineCoreHoldsTheMemory(t *testing.T) {
	srv, gpu := newProcFake(t)
	w := srv.Worker()
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := tb.Get(int32(w.PID()))
	if !ok || int(p.PPID) != srv.Front().PID() || srv.Charge().PID() != w.PID() || gpu.Used() != 8*gib {
		t.Fatalf("engine core %+v %v, charged to %d, used %d; want a child of the API server %d holding 8 GiB",
			p, ok, srv.Charge().PID(), gpu.Used(), srv.Front().PID())
	}
	if a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1", ""); a.status != 200 {
		t.Fatalf("sleep: %+v", a)
	}
	if gpu.Users("vllm") != 0 || gpu.Used() != gib || closed(w.Exited()) {
		t.Fatalf("asleep: users %d, used %d, exited %v; want the residue, no occupancy, the process alive",
			gpu.Users("vllm"), gpu.Used(), closed(w.Exited()))
	}
	if a := send(t, http.MethodPost, srv.URL()+"/wake_up", ""); a.status != 200 {
		t.Fatalf("wake: %+v", a)
	}
	if gpu.Users("vllm") != 1 || gpu.Used() != 8*gib {
		t.Fatalf("awake: users %d, used %d", gpu.Users("vllm"), gpu.Used())
	}
}

// A killed API server refuses at once; its engine core lives on,
// re-parented and charged, until it is killed. A restarted API server
// has an engine core of its own.
func TestProcessesKilledAPIServerLeavesTheEngineCore(t *testing.T) {
	srv, gpu := newProcFake(t)
	w := srv.Worker()
	srv.Kill()
	if c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://")); err == nil {
		c.Close()
		t.Fatal("the killed API server's port accepts")
	}
	if closed(w.Exited()) || gpu.Users("vllm") != 1 || gpu.Used() != 8*gib {
		t.Fatalf("after the kill: exited %v, users %d, used %d; want the engine core alive and charged",
			closed(w.Exited()), gpu.Users("vllm"), gpu.Used())
	}
	w.Kill()
	waitEvent(t, gpu, 0, "weights "+model+" exit")
	if gpu.Used() != 0 {
		t.Fatalf("used %d after the engine core's death", gpu.Used())
	}
	srv.Restart()
	if srv.Worker() == w || gpu.Used() != 8*gib {
		t.Fatalf("restarted: worker %d (was %d), used %d", srv.Worker().PID(), w.PID(), gpu.Used())
	}
	if a := <-goChat(t, srv, false); a.status != 200 {
		t.Fatalf("chat through the restarted API server: %+v", a)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
