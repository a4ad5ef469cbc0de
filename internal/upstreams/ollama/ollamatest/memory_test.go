package ollamatest_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// The fake on a GPU with a size: what Ollama v0.17.4's scheduler does
// with memory (server/sched.go, llm/server.go verifyLayout).

const gib = 1 << 30

func newSizedFake(t *testing.T, total int64, opts ollamatest.Options) (*ollamatest.Server, *ollama.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	gpu.SetMemory(total)
	srv := ollamatest.NewServer(gpu, opts)
	t.Cleanup(func() {
		srv.Close()
		if oc := gpu.OverCommits(); len(oc) != 0 {
			t.Errorf("over-commits: %v", oc)
		}
	})
	c, err := ollama.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

func warm(t *testing.T, url, model, keepAlive string) {
	t.Helper()
	if s, b, err := post(context.Background(), url+"/api/generate", `{"model":"`+model+`","prompt":"","keep_alive":"`+keepAlive+`"}`); err != nil || s != 200 {
		t.Fatalf("warm %s: %d %s %v", model, s, b, err)
	}
}

// sizes lists /api/ps as name size/size_vram.
func sizes(t *testing.T, c *ollama.Client) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, m := range listed(t, c) {
		out[m.Name] = [2]int64{m.Size, m.SizeVRAM}
	}
	return out
}

// Each model charges its own size, listed as size and size_vram; with no
// size on the card, nothing else changes.
func TestModelSizesAreCharged(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{ModelSizes: map[string]int64{"llama3.2": 2 * gib}})
	warm(t, srv.URL, "llama3.2", "5m")
	if gpu.Used() != 2*gib {
		t.Fatalf("used %d, want 2 GiB", gpu.Used())
	}
	warm(t, srv.URL, "qwen3:8b", "5m")
	got := sizes(t, c)
	if got["llama3.2:latest"] != [2]int64{2 * gib, 2 * gib} || got["qwen3:8b"] != [2]int64{5 * gib, 5 * gib} || gpu.Used() != 7*gib {
		t.Fatalf("ps %v, used %d", got, gpu.Used())
	}
	c.Unload(context.Background(), "llama3.2")
	waitEvent(t, gpu, "ollama", "unload llama3.2:latest")
	if gpu.Used() != 5*gib {
		t.Fatalf("used %d after the unload, want 5 GiB", gpu.Used())
	}
}

// A model that does not fit makes Ollama unload an idle model first: the
// one with the shortest keep_alive.
func TestEvictsIdleModelToMakeRoom(t *testing.T) {
	srv, c, gpu := newSizedFake(t, 10*gib, ollamatest.Options{MinimumVRAM: -1,
		ModelSizes: map[string]int64{"llama3.2": 4 * gib, "qwen3:8b": 4 * gib, "nomic-embed-text": 4 * gib}})
	warm(t, srv.URL, "qwen3:8b", "10m")
	warm(t, srv.URL, "llama3.2", "5m")
	warm(t, srv.URL, "nomic-embed-text", "5m")
	got := sizes(t, c)
	if _, ok := got["llama3.2:latest"]; ok || len(got) != 2 || got["nomic-embed-text:latest"] != [2]int64{4 * gib, 4 * gib} {
		t.Fatalf("ps %v, want qwen3:8b (longer keep_alive) and nomic-embed-text whole", got)
	}
	if gputest.Index(gpu.Events(), 0, "ollama", "evict llama3.2:latest to make room for nomic-embed-text:latest") < 0 {
		t.Fatalf("no eviction:\n%s", gputest.Dump(gpu.Events()))
	}
}

// A busy model is not skipped for long: with no idle one, Ollama waits
// for the busy one's requests to end, then unloads it.
func TestWaitsForBusyModelToMakeRoom(t *testing.T) {
	srv, c, gpu := newSizedFake(t, 6*gib, ollamatest.Options{MinimumVRAM: -1, Tokens: 2,
		ModelSizes: map[string]int64{"llama3.2": 4 * gib, "qwen3:8b": 4 * gib}})
	warm(t, srv.URL, "llama3.2", "5m")
	resume := srv.HoldChats()
	defer resume()
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"x"}`)
	}()
	for srv.Inflight() == 0 {
		time.Sleep(time.Millisecond)
	}
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		warm(t, srv.URL, "qwen3:8b", "5m")
	}()
	waitEvent(t, gpu, "ollama", "evict llama3.2:latest to make room for qwen3:8b")
	select {
	case <-loaded:
		t.Fatal("loaded beside a busy model that leaves no room")
	case <-time.After(100 * time.Millisecond):
	}
	resume()
	<-busy
	<-loaded
	if got := sizes(t, c); len(got) != 1 || got["qwen3:8b"] != [2]int64{4 * gib, 4 * gib} {
		t.Fatalf("ps %v, want qwen3:8b alone", got)
	}
}

// Alone and still too big, a model loads partly offloaded to the CPU:
// only what fits beside Ollama's minimum is on the GPU.
func TestPartlyOffloaded(t *testing.T) {
	srv, c, gpu := newSizedFake(t, 8*gib, ollamatest.Options{ModelSizes: map[string]int64{"llama3.2": 6 * gib}})
	defer gpu.Foreign("game", 4242, 3*gib)()
	warm(t, srv.URL, "llama3.2", "5m")
	want := int64(5*gib - 457<<20)
	if got := sizes(t, c)["llama3.2:latest"]; got != [2]int64{6 * gib, want} {
		t.Fatalf("size, size_vram %v, want 6 GiB, %d", got, want)
	}
	if gpu.Used() != 3*gib+want {
		t.Fatalf("used %d", gpu.Used())
	}
}

// A model that fits only without Ollama's minimum is partly offloaded too.
func TestMinimumVRAM(t *testing.T) {
	srv, c, _ := newSizedFake(t, 4*gib, ollamatest.Options{ModelSizes: map[string]int64{"llama3.2": 4 * gib}})
	warm(t, srv.URL, "llama3.2", "5m")
	if got := sizes(t, c)["llama3.2:latest"]; got[1] != 4*gib-457<<20 {
		t.Fatalf("size, size_vram %v on a card exactly its size", got)
	}
}

// With no room at all the model runs on the CPU (size_vram 0), unless
// system memory is short too: then the load fails as Ollama's does.
func TestNoRoomAtAll(t *testing.T) {
	srv, c, gpu := newSizedFake(t, 8*gib, ollamatest.Options{SystemMemory: 4 * gib,
		ModelSizes: map[string]int64{"llama3.2": 2 * gib, "qwen3:8b": 5 * gib}})
	defer gpu.Foreign("game", 4242, 8*gib)()
	warm(t, srv.URL, "llama3.2", "5m")
	if got := sizes(t, c)["llama3.2:latest"]; got != [2]int64{2 * gib, 0} {
		t.Fatalf("size, size_vram %v, want on the CPU", got)
	}
	status, body, err := post(context.Background(), srv.URL+"/api/generate", `{"model":"qwen3:8b","prompt":"x"}`)
	if err != nil || status != 500 || strings.TrimSpace(body) != `{"error":"model requires more system memory (5.0 GiB) than is available (4.0 GiB)"}` {
		t.Fatalf("%d %s %v", status, body, err)
	}
}

// A model listed in OOM fails its load with the runner's cudaMalloc
// error; its memory is freed and it is never listed.
func TestOOM(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{OOM: map[string]bool{"llama3.2": true}})
	status, body, err := post(context.Background(), srv.URL+"/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}`)
	if err != nil || status != 500 || strings.TrimSpace(body) != `{"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}` {
		t.Fatalf("%d %s %v", status, body, err)
	}
	status, body, err = post(context.Background(), srv.URL+"/v1/chat/completions", `{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}`)
	if err != nil || status != 500 || !strings.Contains(body, `"message":"llama runner process has terminated: cudaMalloc failed: out of memory","type":"api_error"`) {
		t.Fatalf("/v1: %d %s %v", status, body, err)
	}
	if ps := listed(t, c); len(ps) != 0 || gpu.Users("ollama") != 0 || gpu.Used() != 0 || srv.Runners() != 0 {
		t.Fatalf("after the failed load: ps %v, users %d, used %d, runners %d", ps, gpu.Users("ollama"), gpu.Used(), srv.Runners())
	}
	warm(t, srv.URL, "qwen3:8b", "5m")
}

// A runner process's memory is listed under its own pid by nvidia-smi.
func TestRunnerMemoryIsItsProcess(t *testing.T) {
	srv, _, gpu := newSizedFake(t, 24*gib, ollamatest.Options{RunnerProcesses: true, ModelSizes: map[string]int64{"llama3.2": 2 * gib}})
	smi := gpu.FakeSMI(t.TempDir())
	warm(t, srv.URL, "llama3.2", "5m")
	pids := srv.RunnerPIDs()
	if len(pids) != 1 {
		t.Fatalf("runners %v", pids)
	}
	out, err := exec.Command(smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits", "-i", "0").Output()
	if err != nil || string(out) != strconv.Itoa(pids[0])+", 2048\n" {
		t.Fatalf("nvidia-smi: %q %v", out, err)
	}
}
