package gpu

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/comfyui"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// probedLLM is a fakeLLM whose Loaded (the readiness probe) is counted,
// may fail, and may block until released or its context ends.
type probedLLM struct {
	fakeLLM
	calls atomic.Int32
	mu    sync.Mutex
	err   error
	block chan struct{}
}

func (e *probedLLM) Loaded(ctx context.Context) ([]string, error) {
	e.calls.Add(1)
	e.mu.Lock()
	err, block := e.err, e.block
	e.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, err
}

func (e *probedLLM) set(err error, block chan struct{}) {
	e.mu.Lock()
	e.err, e.block = err, block
	e.mu.Unlock()
}

var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// newProbedGPU is a GPU over one probedLLM, past its start-up probe, and
// the probe calls that made.
func newProbedGPU(t *testing.T) (*GPU, *probedLLM, int32) {
	e := &probedLLM{}
	c := testConfig()
	c.LLMs = []LLMEngine{e}
	g := New("probed", &recorder{})
	t.Cleanup(g.Close)
	g.Apply(c, zap.NewNop())
	synctest.Wait()
	if ready, st := g.Ready(context.Background(), "llm"); !ready {
		t.Fatalf("not ready after start-up: %+v", st)
	}
	return g, e, e.calls.Load()
}

// A successful contact vouches for an engine for reachableWindow; past
// it, a readiness check probes the engine, and a failed probe makes it
// not ready.
func TestReadyTrustsAContactForTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, e, calls := newProbedGPU(t)
		time.Sleep(reachableWindow - time.Second)
		if ready, _ := g.Ready(context.Background(), "llm"); !ready || e.calls.Load() != calls {
			t.Fatalf("within the window: ready %v after %d probes, want ready without one", ready, e.calls.Load()-calls)
		}
		time.Sleep(2 * time.Second)
		if ready, _ := g.Ready(context.Background(), "llm"); !ready || e.calls.Load() != calls+1 {
			t.Fatalf("past the window: ready %v after %d probes, want ready after one", ready, e.calls.Load()-calls)
		}
		e.set(errRefused, nil)
		time.Sleep(reachableWindow)
		ready, st := g.Ready(context.Background(), "llm")
		if ready || e.calls.Load() != calls+2 {
			t.Fatalf("engine down past the window: ready %v after %d probes, want not ready after two", ready, e.calls.Load()-calls)
		}
		if r := st.Engines[0].Reachable; r == nil || *r {
			t.Fatalf("status reachable %v after a failed probe, want false", r)
		}
		e.set(nil, nil)
		if ready, _ := g.Ready(context.Background(), "llm"); !ready {
			t.Fatal("not ready once the engine answers a probe again")
		}
	})
}

// A forward that could not reach the engine outweighs a recent contact:
// the next check probes at once.
func TestReadyProbesAtOnceAfterAFailedForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, e, calls := newProbedGPU(t)
		e.set(errRefused, nil)
		g.NoteUnreachable(e.Name(), errRefused)
		if ready, _ := g.Ready(context.Background(), "llm"); ready || e.calls.Load() != calls+1 {
			t.Fatalf("after a refused forward: ready %v after %d probes, want not ready after one", ready, e.calls.Load()-calls)
		}
	})
}

// Concurrent checks share one probe, which probe_timeout bounds.
func TestReadyChecksShareOneBoundedProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, e, calls := newProbedGPU(t)
		block := make(chan struct{})
		e.set(nil, block)
		time.Sleep(reachableWindow)
		results := make(chan bool, 5)
		for range cap(results) {
			go func() {
				ready, _ := g.Ready(context.Background(), "llm")
				results <- ready
			}()
		}
		synctest.Wait()
		if n := e.calls.Load() - calls; n != 1 {
			t.Fatalf("%d probes for 5 concurrent checks, want 1", n)
		}
		close(block)
		for range cap(results) {
			if !<-results {
				t.Fatal("a check sharing a successful probe said not ready")
			}
		}

		e.set(nil, make(chan struct{})) // never answers
		time.Sleep(reachableWindow)
		start := time.Now()
		if ready, _ := g.Ready(context.Background(), "llm"); ready {
			t.Fatal("ready while the probe hangs")
		}
		if took := time.Since(start); took != g.cfg().ProbeTimeout {
			t.Fatalf("a hanging probe took %v, want probe_timeout %v", took, g.cfg().ProbeTimeout)
		}
	})
}

// Whatever the engines, nothing is ready while a request would wait: a
// hold is an exclusive holder. No engine of the class is no readiness.
func TestReadyRefusedWhileARequestWouldWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, e, calls := newProbedGPU(t)
		if ready, _ := g.Ready(context.Background(), "image"); ready {
			t.Fatal("image ready with no image engine")
		}
		h, err := g.TakeHold(context.Background(), "test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range []string{"llm", "image"} {
			if ready, st := g.Ready(context.Background(), class); ready || st.State != "hold" {
				t.Fatalf("%s ready %v during a hold (state %s)", class, ready, st.State)
			}
		}
		if e.calls.Load() != calls {
			t.Fatal("an engine was probed for a check that could not pass")
		}
		h.End("released")
		synctest.Wait()
		if ready, _ := g.Ready(context.Background(), "llm"); !ready {
			t.Fatal("not ready once the hold ended")
		}
	})
}

func TestReachabilityNeverContactedIsNotFresh(t *testing.T) {
	var r reachability
	if r.fresh(time.Now(), reachableWindow) {
		t.Fatal("an engine never contacted counts as reachable")
	}
	r.set(nil)
	if !r.fresh(time.Now(), reachableWindow) {
		t.Fatal("an engine just contacted counts as unreachable")
	}
	r.set(errRefused)
	if r.fresh(time.Now(), reachableWindow) {
		t.Fatal("an engine whose last contact failed counts as reachable")
	}
}

// namedLLM is a fakeLLM with a name, kind and URL of its own.
type namedLLM struct {
	fakeLLM
	name, kind, url string
}

func (e *namedLLM) Name() string { return e.name }
func (e *namedLLM) Kind() string { return e.kind }
func (e *namedLLM) URL() string  { return e.url }

func TestEngineFor(t *testing.T) {
	cc, err := comfy.NewClient("http://127.0.0.1:8188", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Config{
		LLMs: []LLMEngine{
			&namedLLM{name: "big", kind: "vllm", url: "http://gpu.lan:8000"},
			&namedLLM{name: "ollama", kind: "ollama", url: "http://127.0.0.1"},
		},
		Images: []ImageEngine{comfyui.New("comfyui", cc, testComfyOptions)},
	}
	for _, tc := range []struct {
		hostport, kind string
		llm            bool
		want           string
	}{
		{"127.0.0.1:80", "", false, "ollama"},   // the default port
		{"GPU.lan:8000", "ollama", true, "big"}, // the address outweighs the route
		{"127.0.0.1:8188", "", false, "comfyui"},
		{"", "comfyui", false, "comfyui"},
		{"10.0.0.9:1", "ollama", false, "ollama"},
		{"", "", true, "big"},
		{"", "", false, ""},
	} {
		got := ""
		if e := c.EngineFor(tc.hostport, tc.kind, tc.llm); e != nil {
			got = e.Name()
		}
		if got != tc.want {
			t.Errorf("EngineFor(%q, %q, %v) = %q, want %q", tc.hostport, tc.kind, tc.llm, got, tc.want)
		}
	}
	only := &Config{Images: c.Images}
	if e := only.EngineFor("", "", false); e == nil || e.Name() != "comfyui" {
		t.Errorf("the only engine not chosen: %v", e)
	}
}
