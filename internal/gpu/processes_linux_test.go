package gpu

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// servedLLM is an LLM engine on this host whose model server is a
// process of the test's (found by its kind, as Ollama's runners are), and
// whose API either answers empty or refuses connections.
type servedLLM struct {
	mu      sync.Mutex
	servers []int32
	refuses bool
	kind    *engine.Kind
}

func newServedLLM() *servedLLM {
	e := &servedLLM{}
	e.kind = &engine.Kind{Name: "served", Class: engine.ClassLLM,
		Servers: func(context.Context, engine.LLM, bool) (engine.ModelServers, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return engine.ModelServers{PIDs: slices.Clone(e.servers), Complete: true, Models: []string{"m"}, Listed: !e.refuses}, nil
		}}
	return e
}

func (e *servedLLM) Kind() string                            { return "served" }
func (e *servedLLM) Name() string                            { return "served" }
func (e *servedLLM) URL() string                             { return "http://127.0.0.1:9" }
func (e *servedLLM) Descriptor() *engine.Kind                { return e.kind }
func (e *servedLLM) Warm(context.Context, string) error      { return engine.ErrNoWarm }
func (e *servedLLM) UnloadSoon(context.Context) (int, error) { return 0, nil }
func (e *servedLLM) Loaded(context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuses {
		return nil, fmt.Errorf("dial tcp 127.0.0.1:9: %w", syscall.ECONNREFUSED)
	}
	return []string{"m"}, nil
}

// Empty answers empty, or refuses connections: either way its API has
// nothing more to say.
func (e *servedLLM) Empty(context.Context, *zap.Logger, time.Time) ([]string, error, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuses {
		refused := fmt.Errorf("dial tcp 127.0.0.1:9: %w", syscall.ECONNREFUSED)
		return nil, refused, engine.RefusedAsEmpty(refused)
	}
	return nil, nil, nil
}

// modelServer starts a process standing for a model server, ended at the
// test's end if it is still running.
func modelServer(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func servedGPU(t *testing.T, e *servedLLM) *GPU {
	t.Helper()
	c := testConfig()
	c.LLMs = []LLMEngine{e}
	c.UnloadTimeout = time.Second
	g := New("served", &recorder{})
	t.Cleanup(g.Close)
	g.Apply(c, zap.NewNop())
	waitStatus(t, g, "started", func(st Status) bool { return st.State == "llm" || st.State == "idle" })
	return g
}

// An engine that refuses connections with a model server alive that was
// seen serving it (a killed llama-swap's orphan) is not emptied: a hold
// is refused naming the process, and the status shows it; once it has
// exited, the hold is granted.
func TestAnEngineIsNotEmptyWhileItsModelServersLive(t *testing.T) {
	for _, refuses := range []bool{true, false} {
		t.Run(fmt.Sprintf("refuses=%v", refuses), func(t *testing.T) {
			e := newServedLLM()
			server := modelServer(t)
			e.servers = []int32{int32(server.Process.Pid)}
			g := servedGPU(t, e)
			g.lookAt(context.Background(), g.cfg(), e, askModels)
			e.mu.Lock()
			e.servers, e.refuses = nil, refuses // it no longer names it
			e.mu.Unlock()

			_, err := g.TakeHold(context.Background(), "test", time.Minute)
			if !errors.Is(err, ErrHoldPrepare) || !strings.Contains(err.Error(), fmt.Sprint(server.Process.Pid)) {
				t.Fatalf("hold with the model server alive: %v; want refused naming pid %d", err, server.Process.Pid)
			}
			st := g.Status()
			if left := st.Engines[0].ProcessesLeft; len(left) != 1 || left[0].PID != int32(server.Process.Pid) || left[0].Name != "sleep" {
				t.Fatalf("processes_left %+v", left)
			}
			if st.Engines[0].Waiting == "" {
				t.Fatal("no reason given for the wait")
			}

			server.Process.Kill()
			server.Wait()
			h, err := g.TakeHold(context.Background(), "test", time.Minute)
			if err != nil {
				t.Fatalf("hold once the model server exited: %v", err)
			}
			h.End("released")
			if left := g.Status().Engines[0].ProcessesLeft; len(left) != 0 {
				t.Fatalf("processes_left %+v once gone", left)
			}
		})
	}
}

// The operator's way past: with no job running, a forced end forgets the
// processes that keep the GPU from the next user; a hold with force does
// not wait for them.
func TestForceForgetsAnEnginesProcesses(t *testing.T) {
	e := newServedLLM()
	server := modelServer(t)
	e.servers, e.refuses = []int32{int32(server.Process.Pid)}, true
	g := servedGPU(t, e)
	g.lookAt(context.Background(), g.cfg(), e, askModels)
	if _, err := g.TakeHold(context.Background(), "test", time.Minute); err == nil {
		t.Fatal("hold granted with the model server alive")
	}
	e.mu.Lock()
	e.servers = nil
	e.mu.Unlock()
	res, err := g.ForceEndJob(context.Background(), "test")
	if err != nil || res.Outcome != OutcomeForgotten || res.Engine != "served" {
		t.Fatalf("forced end: %+v, %v; want the engine's processes forgotten", res, err)
	}
	h, err := g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatalf("hold once forgotten: %v", err)
	}
	h.End("released")
	if _, err := g.ForceEndJob(context.Background(), "test"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("a second forced end with nothing to forget: %v; want ErrNoJob", err)
	}

	e.mu.Lock()
	e.servers = []int32{int32(server.Process.Pid)}
	e.mu.Unlock()
	g.lookAt(context.Background(), g.cfg(), e, askModels)
	forced := WithWaiter(context.Background(), Waiter{Force: true})
	h, err = g.TakeHold(forced, "test", time.Minute)
	if err != nil {
		t.Fatalf("hold with force: %v", err)
	}
	h.End("released")
}

// What is remembered survives a restart through the process store: a new
// GPU that has never seen the engine knows its orphan.
func TestRememberedProcessesSurviveARestart(t *testing.T) {
	e := newServedLLM()
	server := modelServer(t)
	e.servers = []int32{int32(server.Process.Pid)}
	store := &memProcessStore{data: map[string][]byte{}}
	c := testConfig()
	c.LLMs, c.ProcessStore = []LLMEngine{e}, store
	g := New("before", &recorder{})
	g.Apply(c, zap.NewNop())
	g.lookAt(context.Background(), c, e, askModels)
	g.Close()

	e.mu.Lock()
	e.servers, e.refuses = nil, true // restarted, it lists nothing
	e.mu.Unlock()
	c2 := testConfig()
	c2.LLMs, c2.ProcessStore, c2.UnloadTimeout = []LLMEngine{e}, store, time.Second
	g2 := New("after", &recorder{})
	t.Cleanup(g2.Close)
	g2.Apply(c2, zap.NewNop())
	if _, err := g2.TakeHold(context.Background(), "test", time.Minute); err == nil || !strings.Contains(err.Error(), fmt.Sprint(server.Process.Pid)) {
		t.Fatalf("hold after a restart with the orphan alive: %v", err)
	}
}

type memProcessStore struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (s *memProcessStore) LoadProcesses(_ context.Context, engine string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[engine], nil
}

func (s *memProcessStore) SaveProcesses(_ context.Context, engine string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[engine] = data
	return nil
}
