//go:build linux

package turnstile

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ollamaapi "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	ollamaclient "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/realollama"
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
	switch {
	case err != nil && os.Getenv("OLLAMA_BIN") != "":
		t.Fatal(err) // asked for and missing: CI must not pass by skipping
	case err != nil:
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
		{"HoldDrainsAndUnloads", realHoldDrains},
		{"ImageJobDrainsAndUnloads", realImageDrains},
		{"WarmAfterImageJob", realWarmAfterJob},
		{"HoldRacesWarmUp", realHoldRacesWarm},
		{"ImageJobRacesWarmUp", realJobRacesWarm},
		{"ClientLeavesMidLoad", realClientLeavesMidLoad},
		{"WarmUpTimesOut", realWarmTimeout},
		{"EarlyUnload", realEarlyUnload},
		{"JoiningRequestCancelsUnload", realJoiningKeepAlive},
		{"ServeKilledRunnerOrphaned", realOrphanedRunner},
		{"UnloadFigures", realUnloadFigures},
		{"UnloadAllButKeepsOne", realUnloadAllBut},
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
			t.Logf("ollama's log, its last events:\n%s", ollamaEvents(srv, 40))
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

// ollamaEvents returns the last n lines of Ollama's own log (requests,
// loads, unloads), without llama.cpp's loader output.
func ollamaEvents(srv *realollama.Server, n int) string {
	var keep []string
	for line := range strings.Lines(srv.LogTail(1 << 20)) {
		if strings.Contains(line, "level=") || strings.Contains(line, "[GIN]") {
			keep = append(keep, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

// exclusiveUser names who has been given the GPU exclusively: granted
// holds, an image job past its unload (its prompt forwarded to ComfyUI),
// and the fake ComfyUI while it runs a job or keeps its models; "" if
// nobody.
func (r *realRig) exclusiveUser() string {
	var who []string
	st := r.ts().status()
	for _, h := range st.Holds {
		who = append(who, "hold "+h.ID)
	}
	if j := st.Job; j != nil && j.Source == "proxy" && j.Phase != "unloading" {
		who = append(who, "image job of "+j.Started.Format(time.RFC3339Nano))
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

// loadingLog is what Ollama logs once a runner has begun loading the
// model's weights (it has been alive ~10 ms before; a load cancelled
// earlier than this ends with the runner at once).
const loadingLog = `status="llm server loading model"`

// waitLoading waits, from the log mark, until a runner of this Ollama is
// loading a model, and returns the runner.
func (r *realRig) waitLoading(t *testing.T, mark int64) realollama.Process {
	t.Helper()
	if !r.srv.WaitLog(mark, loadingLog, 15*time.Second) {
		t.Fatal("Ollama began no load within 15s")
	}
	return r.waitRunner(t)
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
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || !last.Done || last.DoneReason != "length" {
		t.Errorf("%s: last line %q (%v); want done, done_reason length", what, lines[len(lines)-1], err)
	}
	return len(lines)
}

func realConcurrentStreams(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{numParallel: 3})
	const tokens = 600
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
			req, _ := http.NewRequest(http.MethodPost, r.llm+q.path, strings.NewReader(q.body))
			resp, err := r.client.Do(req)
			if err != nil {
				out[i].res.err = err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			out[i].first = time.Now()
			rest, err2 := io.ReadAll(br)
			out[i].end = time.Now()
			out[i].res = result{status: resp.StatusCode, body: first + string(rest), err: cmp.Or(err, err2)}
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

// longStream is a generation that streams for most of a second or more on
// the tiny model, long enough for what a case does meanwhile
// (milliseconds); with the prompt it fits the 2048-token context.
const longStream = 1500

const holdBody = `{"turnstile":"default","owner":"test","ttl":"1m"}`

// holdID reads a granted hold's id.
func holdID(t *testing.T, r result) string {
	t.Helper()
	if r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("hold: %d %v %s", r.status, r.err, r.body)
	}
	var out struct{ ID string }
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || out.ID == "" {
		t.Fatalf("hold answer %s", r.body)
	}
	return out.ID
}

// loadTiny has the tiny model loaded through Caddy.
func (r *realRig) loadTiny(t *testing.T) {
	t.Helper()
	res := r.post(context.Background(), r.llm+"/api/generate", `{"model":"tiny","prompt":"hi","stream":false,"options":{"num_predict":3}}`)
	if res.err != nil || res.status != 200 {
		t.Fatalf("generate: %d %v %s", res.status, res.err, res.body)
	}
	r.waitListed(t, "tiny:latest")
}

// drain runs an exclusive request (take) while a long stream is in
// flight, and checks the contract: the exclusive request and a new LLM
// request wait, the stream finishes whole, and the exclusive request is
// granted with Ollama empty, no runner left; the LLM request is served
// once the GPU is back.
func (r *realRig) drain(t *testing.T, kind string, take func() <-chan result) (granted result, waiter <-chan result) {
	t.Helper()
	ctx := context.Background()
	finish := r.streamStart(ctx, "/api/generate", genBody("tiny", longStream))
	exclusive := take()
	r.waitStatus(kind+" waiting behind the stream", func(st Status) bool { return st.HoldWaiting+st.ImageWaiting == 1 && st.LLMInflight == 1 })
	waiter = r.postAsync(ctx, r.llm+"/api/generate", `{"model":"tiny","prompt":"hi","stream":false,"options":{"num_predict":3}}`)
	r.waitStatus("an LLM request waiting behind the "+kind, func(st Status) bool { return st.LLMWaiting == 1 })
	if ms := r.ps(t); len(ms) != 1 {
		t.Errorf("while the stream drains Ollama lists %v", modelNames(ms))
	}
	res := finish()
	if res.status != 200 {
		t.Fatalf("stream: %d %s", res.status, res.body)
	}
	ndjsonDone(t, "the stream in flight", res.body)
	granted = <-exclusive
	r.assertEmpty(t, kind+" granted")
	select {
	case w := <-waiter:
		t.Fatalf("an LLM request was served during the %s: %d %s", kind, w.status, w.body)
	default:
	}
	return granted, waiter
}

func realHoldDrains(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{})
	granted, waiter := r.drain(t, "hold", func() <-chan result {
		return r.postAsync(context.Background(), r.admin+"/gpu_turnstile/holds", holdBody)
	})
	id := holdID(t, granted)
	if st := r.ts().status(); st.LLMWaiting != 1 || st.State != "hold" {
		t.Errorf("during the hold: %+v", st)
	}
	r.releaseHold(t, id)
	if w := <-waiter; w.status != 200 || !strings.Contains(w.body, `"done":true`) {
		t.Fatalf("LLM request after the hold: %d %v %s", w.status, w.err, w.body)
	}
	r.waitIdle()
}

func realImageDrains(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{job: 300 * time.Millisecond})
	granted, waiter := r.drain(t, "image job", func() <-chan result {
		return r.postAsync(context.Background(), r.image+"/prompt", promptBody(300))
	})
	promptID(t, granted)
	if w := <-waiter; w.status != 200 || !strings.Contains(w.body, `"done":true`) {
		t.Fatalf("LLM request after the job: %d %v %s", w.status, w.err, w.body)
	}
	r.waitIdle()
	if n := count(r.gpu.Events(), "comfy", "job"); n != 2 { // start and end
		t.Errorf("%d comfy job events, want the job's start and end", n)
	}
}

func realWarmAfterJob(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "warm_model tiny"})
	r.loadTiny(t)
	promptID(t, r.post(context.Background(), r.image+"/prompt", promptBody(500)))
	r.assertEmpty(t, "image job submitted")
	// After the job and ComfyUI's free, the warm model is loaded again
	// (the watcher fails the case if that happened before the free).
	m := r.waitListed(t, "tiny:latest")
	if left := time.Until(m.ExpiresAt); left < 4*time.Minute {
		t.Errorf("warmed model expires in %v, want Ollama's default keep-alive (5m)", left)
	}
	r.waitIdle()
	if st := r.ts().status(); st.State != "idle" {
		t.Errorf("after the warm-up: %+v", st)
	}
}

// warmBig has the turnstile start warming the big model (a hold taken and
// released ends like a job: the warm model is loaded again) and returns
// once its runner is loading it.
func (r *realRig) warmBig(t *testing.T) realollama.Process {
	t.Helper()
	mark := r.srv.LogSize()
	r.releaseHold(t, r.takeHold(t, "first", "1m"))
	r.waitStatus("warming", func(st Status) bool { return st.Warming })
	p := r.waitLoading(t, mark)
	if ms := r.ps(t); len(ms) != 0 {
		t.Fatalf("the big model is listed already, %v: no load to race", modelNames(ms))
	}
	return p
}

func realHoldRacesWarm(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "warm_model big"})
	runner := r.warmBig(t)
	id := r.takeHold(t, "racer", "1m")
	r.assertEmpty(t, "hold taken while the warm model loaded")
	if realollama.Running(runner.PID) {
		t.Errorf("the warm-up's runner %d is alive", runner.PID)
	}
	r.releaseHold(t, id)
}

func realJobRacesWarm(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "warm_model big"})
	runner := r.warmBig(t)
	promptID(t, r.post(context.Background(), r.image+"/prompt", promptBody(500)))
	r.assertEmpty(t, "image job submitted while the warm model loaded")
	if realollama.Running(runner.PID) {
		t.Errorf("the warm-up's runner %d is alive", runner.PID)
	}
	r.waitTimeline("the job's end", func(ev []gputest.Event) bool { return count(ev, "comfy", "end") > 0 })
}

func realClientLeavesMidLoad(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	mark := r.srv.LogSize()
	res := r.postAsync(ctx, r.llm+"/api/generate", `{"model":"big","prompt":"hi","stream":false,"options":{"num_predict":1}}`)
	runner := r.waitLoading(t, mark)
	r.waitStatus("the request in flight", func(st Status) bool { return st.LLMInflight == 1 })
	cancel() // the client leaves while the big model loads
	if got := <-res; got.err == nil {
		t.Fatalf("the request was not cut: %d %s", got.status, got.body)
	}
	// Ollama abandons the load, but its runner lives on for a while and
	// never shows in /api/ps: the hold must wait for it to be gone.
	id := r.takeHold(t, "after-cancel", "1m")
	alive := realollama.Running(runner.PID)
	r.assertEmpty(t, "hold taken right after a client left mid-load")
	if alive {
		t.Errorf("the hold was granted while the abandoned load's runner %d was alive", runner.PID)
	}
	r.releaseHold(t, id)
}

func realWarmTimeout(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "warm_model big\nwarm_timeout 1s"})
	runner := r.warmBig(t)
	// The hold queues behind the warm-up, which gives up after a second
	// while the big model still loads; its runner outlives the request.
	id := r.takeHold(t, "after-warm-timeout", "1m")
	alive := realollama.Running(runner.PID)
	r.assertEmpty(t, "hold taken after the warm-up timed out")
	if alive {
		t.Errorf("the hold was granted while the timed-out warm-up's runner %d was alive", runner.PID)
	}
	r.releaseHold(t, id)
}

// waitUnloadPending waits until Ollama lists model with an expiry that
// is not Ollama's keep-alive but an unload request's time: an unload was
// asked for and waits for the model's requests.
func (r *realRig) waitUnloadPending(t *testing.T, model string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms := r.ps(t)
		i := slices.IndexFunc(ms, func(m ollamaapi.ProcessModelResponse) bool { return m.Name == model })
		if i < 0 {
			t.Fatalf("%s is not listed: %v", model, modelNames(ms))
		}
		if time.Until(ms[i].ExpiresAt) < time.Minute {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no unload of %s requested within 10s; it expires at %v", model, ms[i].ExpiresAt)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func realEarlyUnload(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "early_unload"})
	ctx := context.Background()
	finish := r.streamStart(ctx, "/api/generate", genBody("tiny", longStream))
	job := r.postAsync(ctx, r.image+"/prompt", promptBody(100))
	r.waitStatus("image job waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	r.waitUnloadPending(t, "tiny:latest")
	if st := r.ts().status(); st.LLMInflight != 1 || st.State != "llm" {
		t.Fatalf("the unload was not early: the stream no longer holds the GPU: %+v", st)
	}
	res := finish()
	ndjsonDone(t, "the stream during the early unload", res.body) // not cut short
	promptID(t, <-job)
	r.assertEmpty(t, "image job submitted")
	r.waitIdle()
}

func realJoiningKeepAlive(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "early_unload\nunload_timeout 20s"})
	ctx := context.Background()
	finish := r.streamStart(ctx, "/api/generate", genBody("tiny", longStream))
	// A second request, admitted before the image job comes, waits inside
	// Ollama (one slot) and reaches the model after the early unload was
	// asked for; its own keep_alive cancels that unload.
	joiner := r.postAsync(ctx, r.llm+"/api/generate", `{"model":"tiny","prompt":"hi","stream":false,"keep_alive":"5m","options":{"num_predict":20}}`)
	r.waitStatus("both requests in flight", func(st Status) bool { return st.LLMInflight == 2 })
	job := r.postAsync(ctx, r.image+"/prompt", promptBody(100))
	r.waitStatus("image job waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	r.waitUnloadPending(t, "tiny:latest")
	ndjsonDone(t, "the stream", finish().body)
	if j := <-joiner; j.status != 200 || !strings.Contains(j.body, `"done":true`) {
		t.Fatalf("joining request: %d %v %s", j.status, j.err, j.body)
	}
	// The model is still loaded; the image job must still get a GPU
	// that Ollama has left.
	promptID(t, <-job)
	r.assertEmpty(t, "image job submitted")
	r.waitIdle()
}

func realOrphanedRunner(t *testing.T, e *realEnv) {
	r := e.start(t, rigOptions{settings: "unload_timeout 30s"})
	r.loadTiny(t)
	runner := r.waitRunner(t)
	r.srv.Kill() // SIGKILL to `ollama serve` only, as the OOM killer or kill -9 would
	if !realollama.Running(runner.PID) {
		t.Fatalf("runner %d ended with its server; no orphan to test with", runner.PID)
	}
	// Ollama's port refuses connections now, yet the orphan holds the
	// model's memory: no hold while it lives. Nothing will change while
	// it lives, so a grant within two seconds is as wrong as any.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hold := r.postAsync(ctx, r.admin+"/gpu_turnstile/holds", holdBody)
	var got result
	select {
	case got = <-hold:
		t.Errorf("hold answered while orphaned runner %d is alive: %d %s", runner.PID, got.status, got.body)
	case <-time.After(2 * time.Second):
	}
	realollama.KillAll([]realollama.Process{runner})
	if got.status == 0 {
		got = <-hold
	}
	id := holdID(t, got)
	r.assertNoRunner(t, "hold granted after the orphan was gone")
	r.releaseHold(t, id)
}

func (r *realRig) assertNoRunner(t *testing.T, when string) {
	t.Helper()
	if rs := r.srv.Runners(); len(rs) > 0 {
		t.Errorf("%s: a runner of Ollama is alive: %v", when, rs)
	}
}

// realUnloadFigures measures, for BENCHMARKS.md, how long Ollama itself
// takes to unload each model (keep_alive 0 until /api/ps no longer lists
// it, and until its runner has exited) and how long a hold takes through
// the turnstile with the model loaded (request to 201). It runs only with
// REALOLLAMA_FIGURES=N (N rounds per model) and logs the figures.
func realUnloadFigures(t *testing.T, e *realEnv) {
	rounds, _ := strconv.Atoi(os.Getenv("REALOLLAMA_FIGURES"))
	if rounds <= 0 {
		t.Skip("set REALOLLAMA_FIGURES=N to measure unload times over N rounds")
	}
	r := e.start(t, rigOptions{})
	ctx := context.Background()
	zero := &ollamaapi.Duration{}
	for _, model := range []string{"tiny", "big"} {
		var load, listed, gone, hold []time.Duration
		for range rounds {
			start := time.Now()
			if err := r.srv.Client.Generate(ctx, &ollamaapi.GenerateRequest{Model: model}, func(ollamaapi.GenerateResponse) error { return nil }); err != nil {
				t.Fatal(err)
			}
			load = append(load, time.Since(start))
			runners := r.srv.Runners()
			if len(runners) != 1 {
				t.Fatalf("runners %v", runners)
			}
			start = time.Now()
			if err := r.srv.Client.Generate(ctx, &ollamaapi.GenerateRequest{Model: model, KeepAlive: zero}, func(ollamaapi.GenerateResponse) error { return nil }); err != nil {
				t.Fatal(err)
			}
			for len(r.ps(t)) > 0 {
				time.Sleep(time.Millisecond)
			}
			listed = append(listed, time.Since(start))
			if !realollama.WaitGone(runners[0].PID, 30*time.Second) {
				t.Fatalf("runner %v still alive 30s after the unload", runners[0])
			}
			gone = append(gone, time.Since(start))

			if res := r.post(ctx, r.llm+"/api/generate", fmt.Sprintf(`{"model":%q}`, model)); res.status != 200 {
				t.Fatalf("load through Caddy: %d %s", res.status, res.body)
			}
			start = time.Now()
			id := r.takeHold(t, "figures", "1m")
			hold = append(hold, time.Since(start))
			r.assertEmpty(t, "hold granted")
			r.releaseHold(t, id)
			r.waitIdle()
		}
		t.Logf("%s (%d rounds, median [min-max]): load %s; Ollama's own unload: gone from /api/ps %s, runner exited %s; hold through the turnstile %s",
			model, rounds, spread(load), spread(listed), spread(gone), spread(hold))
	}
}

// spread formats durations as "median [min-max]".
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration {
		if d < 100*time.Millisecond {
			return d.Round(100 * time.Microsecond)
		}
		return d.Round(time.Millisecond)
	}
	return fmt.Sprintf("%v [%v-%v]", r(s[len(s)/2]), r(s[0]), r(s[len(s)-1]))
}

// realUnloadAllBut runs the client's UnloadAllBut against the real server,
// as an image job does when it keeps a co_resident model loaded: the model
// not kept is unloaded and its runner ends; the kept one stays listed, its
// runner alive.
func realUnloadAllBut(t *testing.T, e *realEnv) {
	ctx := context.Background()
	srv, err := realollama.Start(ctx, e.bin, t.TempDir(), realollama.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := ollamaclient.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]realollama.File{"tiny": e.tiny, "big": e.big} {
		if err := srv.Create(ctx, name, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"tiny", "big"} {
		if err := c.Warm(ctx, m, ""); err != nil {
			t.Fatal(err)
		}
	}
	if ps, err := c.PS(ctx); err != nil || len(ps) != 2 || len(srv.Runners()) != 2 {
		t.Fatalf("before: %v %v, runners %v; want both models loaded", ps, err, srv.Runners())
	}
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	names, kept, err := c.UnloadAllBut(uctx, 100*time.Millisecond, func(name string) bool { return name == "tiny:latest" })
	if err != nil || !slices.Equal(names, []string{"big:latest"}) || !slices.Equal(kept, []string{"tiny:latest"}) {
		t.Fatalf("unloaded %v, kept %v, %v; want big:latest unloaded, tiny:latest kept", names, kept, err)
	}
	ps, err := c.PS(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "tiny:latest" {
		t.Fatalf("after: %v %v; want tiny:latest alone", ps, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.Runners()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("runners %v 10 s after the unload: want the kept model's alone", srv.Runners())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
