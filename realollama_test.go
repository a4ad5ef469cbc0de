//go:build linux

package turnstile

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ollamaapi "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/ollama/realollama"
)

// The real Ollama server behind Caddy and the turnstile, with the fake
// ComfyUI on the image side. The server is $OLLAMA_BIN or the one
// .ci/ollama.sh builds and caches; without it the whole suite is skipped
// with one line. Models are tiny random-weight GGUF files (see package
// realollama): "tiny" loads in ~0.3 s, "big" in seconds.
//
//	OLLAMA_BIN=$(.ci/ollama.sh) go test -run TestRealOllama -v .
//
// Every case runs its own `ollama serve` and its own Caddy, and a watcher
// samples, every 2 ms, who holds the GPU exclusively and which runner
// processes of that Ollama are alive (/proc, orphans included): a hold
// or a ComfyUI job granted while a runner lives fails the case. Runner
// processes, not /api/ps, are what hold a model's memory: a model that is
// loading, or whose load was abandoned, is not listed.

type realEnv struct {
	bin       string
	tiny, big realollama.File
}

func TestRealOllama(t *testing.T) {
	bin, err := realollama.Binary()
	if err != nil {
		t.Skipf("real Ollama tests skipped: %v", err)
	}
	dir := t.TempDir()
	e := &realEnv{bin: bin}
	start := time.Now()
	if e.tiny, err = realollama.Tiny.Write(filepath.Join(dir, "tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	if e.big, err = realollama.Big.Write(filepath.Join(dir, "big.gguf")); err != nil {
		t.Fatal(err)
	}
	t.Logf("ollama %s (%s); models written in %v", realollama.Version(), bin, time.Since(start).Round(time.Millisecond))

	for _, c := range []struct {
		name string
		run  func(*testing.T, *realEnv)
	}{
		{"ConcurrentStreams", realConcurrentStreams},
		{"OllamaGoClient", realOllamaGoClient},
		{"OpenAIGoClient", realOpenAIGoClient},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
}

// realRig is one case's Ollama and Caddy.
type realRig struct {
	*harness
	srv *realollama.Server

	mu     sync.Mutex
	shared []string // samples that saw the GPU shared
	nShare int
}

type rigOptions struct {
	settings    string        // extra lines for the gpu_turnstile block
	numParallel int           // OLLAMA_NUM_PARALLEL; 0: Ollama's default (1)
	job         time.Duration // the fake ComfyUI's job duration
}

func (e *realEnv) start(t *testing.T, o rigOptions) *realRig {
	t.Helper()
	ctx := context.Background()
	srv, err := realollama.Start(ctx, e.bin, t.TempDir(), realollama.Options{NumParallel: o.numParallel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		if t.Failed() {
			t.Logf("ollama log, last lines:\n%s", srv.LogTail(8000))
		}
	})
	for name, f := range map[string]realollama.File{"tiny": e.tiny, "big": e.big} {
		if err := srv.Create(ctx, name, f); err != nil {
			t.Fatal(err)
		}
	}
	job := o.job
	if job == 0 {
		job = 100 * time.Millisecond
	}
	r := &realRig{srv: srv}
	r.harness = newHarness(t, harnessOptions{ollamaURL: srv.URL, settings: o.settings, comfy: comfyOpts(job)})
	r.watch(t)
	return r
}

// exclusiveUser names who holds the GPU exclusively now: granted holds
// and the fake ComfyUI while it runs a job or keeps its models; "" if
// nobody.
func (r *realRig) exclusiveUser() string {
	var who []string
	for _, h := range r.ts().status().Holds {
		who = append(who, "hold "+h.ID)
	}
	if r.gpu.Users("comfy") > 0 {
		who = append(who, "comfyui")
	}
	return strings.Join(who, ", ")
}

// watch fails the test if the GPU was ever seen shared: an exclusive
// user before and after a scan that found a runner of this Ollama alive.
func (r *realRig) watch(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			who := r.exclusiveUser()
			if who == "" {
				continue
			}
			runners := r.srv.Runners()
			if len(runners) == 0 || r.exclusiveUser() != who {
				continue
			}
			r.mu.Lock()
			r.nShare++
			if len(r.shared) < 5 {
				r.shared = append(r.shared, fmt.Sprintf("%s %s while runner %v", time.Now().Format("15:04:05.000"), who, runners))
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.nShare > 0 {
			t.Errorf("the GPU was shared: %d samples (2 ms apart) saw an exclusive holder while a runner of this Ollama was alive; first:\n%s",
				r.nShare, strings.Join(r.shared, "\n"))
		}
	})
}

// ps lists what the real Ollama has loaded (asked directly, not through
// Caddy).
func (r *realRig) ps(t *testing.T) []ollamaapi.ProcessModelResponse {
	t.Helper()
	res, err := r.srv.Client.ListRunning(context.Background())
	if err != nil {
		t.Fatalf("ollama /api/ps: %v", err)
	}
	return res.Models
}

func modelNames(ms []ollamaapi.ProcessModelResponse) []string {
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return names
}

// assertEmpty fails unless Ollama lists no model and none of its runner
// processes is alive.
func (r *realRig) assertEmpty(t *testing.T, when string) {
	t.Helper()
	if rs := r.srv.Runners(); len(rs) > 0 {
		t.Errorf("%s: a runner of Ollama is alive: %v", when, rs)
	}
	if ms := r.ps(t); len(ms) > 0 {
		t.Errorf("%s: Ollama's /api/ps lists %v", when, modelNames(ms))
	}
}

// waitRunner waits until a runner of this Ollama is alive and returns it.
func (r *realRig) waitRunner(t *testing.T) realollama.Process {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if rs := r.srv.Runners(); len(rs) > 0 {
			return rs[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no runner of Ollama started within 15s")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitListed waits until Ollama's /api/ps lists model.
func (r *realRig) waitListed(t *testing.T, model string) ollamaapi.ProcessModelResponse {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, m := range r.ps(t) {
			if m.Name == model {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listed by /api/ps within 30s", model)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func genBody(model string, predict int) string {
	return fmt.Sprintf(`{"model":%q,"prompt":"hi","options":{"num_predict":%d}}`, model, predict)
}

// ndjsonDone checks an /api/* stream: a JSON object per line, the last one
// done with done_reason length (num_predict reached), and returns its
// number of lines.
func ndjsonDone(t *testing.T, what, body string) int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(body), "\n")
	var last struct {
		Done       bool   `json:"done"`
		DoneReason string `json:"done_reason"`
		Error      string `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || !last.Done || last.DoneReason != "length" {
		t.Errorf("%s: last line %q (%v); want done, done_reason length", what, lines[len(lines)-1], err)
	}
	return len(lines)
}

func realConcurrentStreams(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{numParallel: 3})
	const tokens = 300
	reqs := []struct{ path, body string }{
		{"/api/chat", fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":%d}}`, tokens)},
		{"/api/generate", genBody("tiny", tokens)},
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":%d}`, tokens)},
	}
	type stream struct {
		first, end time.Time
		res        result
	}
	out := make([]stream, len(reqs))
	var wg sync.WaitGroup
	for i, q := range reqs {
		wg.Go(func() {
			finish := r.streamStart(context.Background(), q.path, q.body)
			out[i].first = time.Now()
			out[i].res = finish()
			out[i].end = time.Now()
		})
	}
	// All three are in flight together, through Caddy and the turnstile.
	st := r.waitStatus("three LLM requests in flight", func(st Status) bool { return st.LLMInflight == 3 })
	if st.State != "llm" {
		t.Errorf("state %q with three requests in flight", st.State)
	}
	wg.Wait()
	for i, s := range out {
		if s.res.err != nil || s.res.status != 200 {
			t.Fatalf("%s: %d %v %s", reqs[i].path, s.res.status, s.res.err, s.res.body)
		}
		for j, o := range out {
			if !s.first.Before(o.end) {
				t.Errorf("%s had not started when %s ended: the streams did not overlap", reqs[i].path, reqs[j].path)
			}
		}
	}
	for i := range 2 {
		if n := ndjsonDone(t, reqs[i].path, out[i].res.body); n < tokens/2 {
			t.Errorf("%s: %d lines for %d tokens", reqs[i].path, n, tokens)
		}
	}
	sse := out[2].res.body
	if !strings.HasPrefix(sse, "data: ") || !strings.HasSuffix(strings.TrimSpace(sse), "data: [DONE]") {
		t.Errorf("/v1/chat/completions: not an SSE stream ending in [DONE]: %.200q ... %.200q", sse, sse[max(0, len(sse)-200):])
	}
	r.waitIdle()
	// Shared use leaves the model loaded.
	if names := modelNames(r.ps(t)); !slices.Equal(names, []string{"tiny:latest"}) {
		t.Errorf("after the streams Ollama lists %v, want tiny:latest", names)
	}
}

func realOllamaGoClient(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{})
	base, _ := url.Parse(r.llm)
	c := ollamaapi.NewClient(base, r.client)
	ctx := context.Background()

	var chunks int
	var last ollamaapi.ChatResponse
	err := c.Chat(ctx, &ollamaapi.ChatRequest{Model: "tiny", Messages: []ollamaapi.Message{{Role: "user", Content: "hi"}},
		Options: map[string]any{"num_predict": 20}},
		func(cr ollamaapi.ChatResponse) error {
			chunks++
			last = cr
			return nil
		})
	if err != nil || chunks < 10 || !last.Done || last.DoneReason != "length" || last.EvalCount != 20 {
		t.Fatalf("chat: %d chunks, last %+v, err %v; want a stream of 20 tokens", chunks, last, err)
	}
	stream := false
	var gen ollamaapi.GenerateResponse
	if err := c.Generate(ctx, &ollamaapi.GenerateRequest{Model: "tiny", Prompt: "hi", Stream: &stream, Options: map[string]any{"num_predict": 5}},
		func(g ollamaapi.GenerateResponse) error { gen = g; return nil }); err != nil || !gen.Done || gen.EvalCount != 5 {
		t.Fatalf("generate: %+v %v", gen, err)
	}
	emb, err := c.Embed(ctx, &ollamaapi.EmbedRequest{Model: "tiny", Input: "hi"})
	if err != nil || len(emb.Embeddings) != 1 || len(emb.Embeddings[0]) != realollama.Tiny.Embd {
		t.Fatalf("embed: %+v %v", emb, err)
	}
	running, err := c.ListRunning(ctx)
	if err != nil || len(running.Models) != 1 || running.Models[0].Name != "tiny:latest" {
		t.Fatalf("ps through the proxy: %+v %v", running, err)
	}
	tags, err := c.List(ctx)
	if err != nil || len(tags.Models) != 2 {
		t.Fatalf("tags through the proxy: %+v %v", tags, err)
	}
	// Through the turnstile's hold the client sees Ollama emptied, and
	// its next request load the model again.
	hold := r.takeHold(t, "test", "1m")
	r.assertEmpty(t, "hold granted")
	r.releaseHold(t, hold)
	if err := c.Generate(ctx, &ollamaapi.GenerateRequest{Model: "tiny", Prompt: "hi", Stream: &stream, Options: map[string]any{"num_predict": 5}},
		func(g ollamaapi.GenerateResponse) error { gen = g; return nil }); err != nil || gen.EvalCount != 5 || gen.LoadDuration == 0 {
		t.Fatalf("generate after the hold: %+v %v; want a fresh load", gen, err)
	}
	r.waitIdle()
}

func realOpenAIGoClient(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{})
	c := openai.NewClient(option.WithBaseURL(r.llm+"/v1/"), option.WithAPIKey("unused"),
		option.WithHTTPClient(r.client), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(20)}

	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var chunks int
	var finish string
	for stream.Next() {
		chunks++
		for _, ch := range stream.Current().Choices {
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil || chunks < 10 || finish != "length" {
		t.Fatalf("stream: %d chunks, finish %q, err %v", chunks, finish, err)
	}
	comp, err := c.Chat.Completions.New(ctx, params)
	if err != nil || len(comp.Choices) != 1 || comp.Usage.CompletionTokens != 20 {
		t.Fatalf("completion: %+v %v", comp, err)
	}
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "tiny", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) != realollama.Tiny.Embd {
		t.Fatalf("embeddings: %+v %v", emb, err)
	}
	models, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"big:latest", "tiny:latest"}) {
		t.Fatalf("models through the proxy: %v", ids)
	}
	r.waitIdle()
}

var _ = bufio.NewReader
var _ = http.MethodPost
