package ollamatest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// Each test here pins one fact of upstream-api.md that the turnstile must
// cope with; a fake kinder than Ollama would make the turnstile's tests
// prove nothing.

func newFake(t *testing.T, opts ollamatest.Options) (*ollamatest.Server, *ollama.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := ollamatest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	c, err := ollama.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

func post(ctx context.Context, url, body string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func listed(t *testing.T, c *ollama.Client) []ollama.RunningModel {
	t.Helper()
	ps, err := c.PS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func waitEvent(t *testing.T, gpu *gputest.GPU, service, substr string) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, service, substr) >= 0 }) {
		t.Fatalf("no %q event:\n%s", substr, gputest.Dump(gpu.Events()))
	}
}

func TestVersion(t *testing.T) {
	srv, _, _ := newFake(t, ollamatest.Options{})
	resp, err := http.Get(srv.URL + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	json.NewDecoder(resp.Body).Decode(&v)
	if v.Version != "0.17.4" {
		t.Fatalf("version %q, want the one go.mod pins, 0.17.4", v.Version)
	}
}

// A loading model is not in /api/ps, yet it holds memory.
func TestLoadingModelIsInvisibleButResident(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{LoadDelay: 300 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"","keep_alive":"5m"}`)
	}()
	waitEvent(t, gpu, "ollama", "load llama3.2")
	if ps := listed(t, c); len(ps) != 0 {
		t.Fatalf("a loading model is listed: %v", ps)
	}
	if gpu.Users("ollama") != 1 {
		t.Fatal("a loading model holds no memory")
	}
	<-done
	if ps := listed(t, c); len(ps) != 1 {
		t.Fatalf("a loaded model is not listed: %v", ps)
	}
}

// keep_alive 0 during a load is answered 200 "unload" and ignored: the
// model loads and stays.
func TestUnloadDuringLoadIsIgnored(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{LoadDelay: 200 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":""}`)
	}()
	waitEvent(t, gpu, "ollama", "load llama3.2")
	status, body, err := post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","keep_alive":0}`)
	if err != nil || status != 200 || !strings.Contains(body, `"done_reason":"unload"`) || !strings.Contains(body, `"model":"llama3.2"`) {
		t.Fatalf("unload answer %d %s %v, want 200 unload echoing the name as sent", status, body, err)
	}
	<-done
	ps := listed(t, c)
	if len(ps) != 1 || !ps[0].ExpiresAt.After(time.Now().Add(4*time.Minute)) {
		t.Fatalf("after an unload sent during the load: %v, want the model listed for its 5m keep_alive", ps)
	}
}

// A request with its own keep_alive that reaches a model whose unload is
// pending cancels the unload; one without does not.
func TestJoiningRequestCancelsAPendingUnload(t *testing.T) {
	for _, tc := range []struct {
		keepAlive string
		stays     bool
	}{{`,"keep_alive":"5m"`, true}, {``, false}} {
		srv, c, _ := newFake(t, ollamatest.Options{Tokens: 3, TokenDelay: 100 * time.Millisecond, Parallel: 2})
		ctx := context.Background()
		if s, b, err := post(ctx, srv.URL+"/api/generate", `{"model":"llama3.2","prompt":""}`); err != nil || s != 200 {
			t.Fatalf("warm: %d %s %v", s, b, err)
		}
		first := make(chan struct{})
		go func() {
			defer close(first)
			post(ctx, srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"a","stream":false}`)
		}()
		// The unload waits for the running request; the joining one
		// arrives while it is pending.
		for srv.Inflight() == 0 {
			time.Sleep(time.Millisecond)
		}
		c.Unload(ctx, "llama3.2")
		if s, b, err := post(ctx, srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"b","stream":false`+tc.keepAlive+`}`); err != nil || s != 200 {
			t.Fatalf("joining request: %d %s %v", s, b, err)
		}
		<-first
		ps := listed(t, c)
		gone := len(ps) == 0 || !ps[0].ExpiresAt.After(time.Now())
		if tc.stays == gone {
			t.Errorf("keep_alive %q: after the requests, listed %v; want stays=%v", tc.keepAlive, ps, tc.stays)
		}
	}
}

// A client that goes away during the load makes Ollama abort it; the
// runner lives on a while, holding memory, and is never listed.
func TestAbortedLoadLeavesRunnerAWhile(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{LoadDelay: time.Hour, AbortDelay: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go post(ctx, srv.URL+"/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}`)
	waitEvent(t, gpu, "ollama", "load llama3.2")
	cancel()
	waitEvent(t, gpu, "ollama", "abort llama3.2")
	if ps := listed(t, c); len(ps) != 0 || gpu.Users("ollama") != 1 || srv.Runners() != 1 {
		t.Fatalf("right after the abort: listed %v, users %d, runners %d; want unlisted and resident", ps, gpu.Users("ollama"), srv.Runners())
	}
	waitEvent(t, gpu, "ollama", "exit after abort llama3.2")
	if gpu.Users("ollama") != 0 || srv.Runners() != 0 {
		t.Fatal("the runner's memory outlived its exit")
	}
}

// At OLLAMA_NUM_PARALLEL=1 (v0.17.4's default) concurrent requests on one
// model are served one after another.
func TestOneModelServesOneRequestAtATime(t *testing.T) {
	srv, _, gpu := newFake(t, ollamatest.Options{Tokens: 2, TokenDelay: 20 * time.Millisecond})
	resume := srv.HoldChats()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"x"}`)
		})
	}
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return count(ev, "queued on llama3.2") == 2 }) {
		t.Fatalf("the two later requests never queued:\n%s", gputest.Dump(gpu.Events()))
	}
	if n := srv.Inflight(); n != 1 {
		t.Fatalf("%d requests generate at once, want 1", n)
	}
	resume()
	wg.Wait()
}

// Ollama's repeat guard ends a stream on a "done":false line.
func TestStreamsCanEndUndone(t *testing.T) {
	srv, _, _ := newFake(t, ollamatest.Options{})
	srv.SetStreamsUndone(true)
	_, body, err := post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for sc := bufio.NewScanner(strings.NewReader(body)); sc.Scan(); {
		last = sc.Text()
	}
	if !strings.Contains(last, `"done":false`) || strings.Contains(body, `"done":true`) {
		t.Fatalf("stream %s, want it to end on done:false", body)
	}
}

// A killed `ollama serve` refuses connections, and its runners live on
// with their memory, as real processes named like Ollama's runners.
func TestKilledServerLeavesOrphanedRunners(t *testing.T) {
	srv, c, gpu := newFake(t, ollamatest.Options{RunnerProcesses: true})
	if s, b, err := post(context.Background(), srv.URL+"/api/generate", `{"model":"llama3.2","prompt":""}`); err != nil || s != 200 {
		t.Fatalf("warm: %d %s %v", s, b, err)
	}
	pids := srv.RunnerPIDs()
	if len(pids) != 1 {
		t.Fatalf("runner processes %v, want one", pids)
	}
	runners, visible, err := c.LocalRunners(context.Background())
	if err != nil || !visible || len(runners) != 1 || runners[0].PID != int32(pids[0]) || runners[0].Model != "llama3.2:latest" {
		t.Fatalf("LocalRunners %+v %v %v, want the fake's runner %d", runners, visible, err, pids[0])
	}
	srv.Kill()
	if _, err := c.PS(context.Background()); err == nil {
		t.Fatal("a killed server still answers")
	}
	if gpu.Users("ollama") != 1 || !alive(pids[0]) {
		t.Fatal("the runner died with the server")
	}
	srv.KillRunners()
	if gpu.Users("ollama") != 0 || alive(pids[0]) {
		t.Fatal("KillRunners left the runner")
	}
	if runners, _, _ := c.LocalRunners(context.Background()); len(runners) != 0 {
		t.Fatalf("LocalRunners after the kill: %v", runners)
	}
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func count(events []gputest.Event, substr string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e.What, substr) {
			n++
		}
	}
	return n
}
