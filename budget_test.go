package turnstile

import (
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// bigChat is an Ollama chat request of exactly size bytes.
func bigChat(size int) string {
	head, tail := `{"model":"llama3.2","stream":false,"messages":[{"role":"user","content":"`, `"}]}`
	return head + strings.Repeat("a", size-len(head)-len(tail)) + tail
}

// bigPrompt is a ComfyUI prompt of exactly size bytes.
func bigPrompt(size int) string {
	head := `{"prompt":{"3":{"class_type":"KSampler","inputs":{}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"big","extra_data":{"fake_duration_ms":10,"pad":"`
	tail := `"}}`
	return head + strings.Repeat("p", size-len(head)-len(tail)) + tail
}

// postChunked posts body without a Content-Length (chunked encoding).
func (h *harness) postChunked(ctx context.Context, url, body string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, io.MultiReader(strings.NewReader(body)))
	if err != nil {
		return result{err: err}
	}
	return h.send(req)
}

// TestWaitBufferLimitBoundsWaitingBodies queues 100 chats of 8 MiB behind
// a hold with the default wait_buffer_limit (256 MiB): 32 fit and wait,
// the other 68 get the busy answer at once, the buffered bytes never pass
// the limit, and after the hold the 32 are served. None is lost. Under the
// race detector, which makes moving 1 GiB take a minute, the sizes are
// divided by 8 (1 MiB bodies, a 32 MiB limit): the same 32 and 68.
func TestWaitBufferLimitBoundsWaitingBodies(t *testing.T) {
	n, size, settings := 100, 8<<20, ""
	if raceEnabled {
		size, settings = 1<<20, "wait_buffer_limit 32MiB"
	}
	h := newHarness(t, harnessOptions{settings: settings})
	limit := h.ts().cfg().WaitBuffer
	if want := int64(32 * size); limit != want {
		t.Fatalf("wait_buffer_limit %d, want %d (256 MiB by default)", limit, want)
	}
	fit := int(limit / int64(size))
	overload := `gpu_turnstile_busy_total{reason="overload",turnstile="default"}`
	overload0 := h.metric(t, overload)
	hold := h.takeHold(t, "test", "5m")

	body := bigChat(size)
	results := make(chan result, n)
	for range n {
		go func() { results <- h.post(context.Background(), h.llm+"/api/chat", body) }()
	}
	// With the hold still in place, the requests over the limit are
	// answered, and only those.
	timeout := time.After(30 * time.Second)
	for i := range n - fit {
		var r result
		select {
		case r = <-results:
		case <-timeout:
			t.Fatalf("only %d of %d busy answers while the hold is in place; status %+v", i, n-fit, h.ts().status())
		}
		var e struct{ Error string }
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "30" ||
			json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Error, "wait_buffer_limit") {
			t.Fatalf("answer %d before the hold ended: %d Retry-After %q %v %.300s", i, r.status, r.header.Get("Retry-After"), r.err, r.body)
		}
	}
	st := h.waitStatus("the rest waiting", func(st Status) bool { return st.LLMWaiting == fit })
	if st.WaitBuffer.Bytes != int64(fit*size) || st.WaitBuffer.Limit != limit {
		t.Fatalf("wait_buffer %+v with %d waiting, want %d bytes of %d", st.WaitBuffer, fit, fit*size, limit)
	}
	if got := h.status().WaitBuffer; got.Bytes != int64(fit*size) {
		t.Fatalf("status JSON wait_buffer %+v", got)
	}
	if got := h.metric(t, `gpu_turnstile_wait_buffer_bytes{turnstile="default"}`); got != float64(fit*size) {
		t.Fatalf("wait_buffer_bytes gauge %v, want %d", got, fit*size)
	}
	if got := h.metric(t, overload) - overload0; got != float64(n-fit) {
		t.Fatalf("busy_total{reason=overload} +%v, want +%d", got, n-fit)
	}
	if h.ollama.Requests() != 0 {
		t.Fatal("a request reached Ollama during the hold")
	}

	h.releaseHold(t, hold)
	for i := range fit {
		r := <-results
		if r.err != nil || r.status != http.StatusOK || !strings.Contains(r.body, `"done":true`) {
			t.Fatalf("waiting request %d after the hold: %d %v %.300s", i, r.status, r.err, r.body)
		}
	}
	h.waitIdle()
	if got := h.ts().status().WaitBuffer; got.Bytes != 0 || got.Peak != int64(fit*size) || got.Peak > limit {
		t.Fatalf("after the run wait_buffer %+v, want 0 bytes and a peak of %d (limit %d)", got, fit*size, limit)
	}
	if got := h.ollama.Requests(); got != int64(fit) {
		t.Fatalf("Ollama got %d requests, want the %d that waited", got, fit)
	}
}

// TestWaitBufferLimitImagePrompts: a prompt that does not fit gets
// ComfyUI's error shape with 503 and Retry-After, at once; the one that
// fits runs after the hold.
func TestWaitBufferLimitImagePrompts(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "wait_buffer_limit 1MiB\nbusy_retry_after 7s", comfy: comfyOpts(10 * time.Millisecond)})
	hold := h.takeHold(t, "test", "1m")
	first := h.postAsync(context.Background(), h.image+"/prompt", bigPrompt(600<<10))
	h.waitStatus("the first prompt waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	r := h.post(context.Background(), h.image+"/api/prompt", bigPrompt(600<<10))
	var e struct {
		Error struct{ Type, Message string }
	}
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "7" ||
		json.Unmarshal([]byte(r.body), &e) != nil || e.Error.Type != "gpu_busy" || !strings.Contains(e.Error.Message, "wait_buffer_limit") ||
		!strings.Contains(r.body, `"node_errors":{}`) {
		t.Fatalf("second prompt: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	h.releaseHold(t, hold)
	promptID(t, <-first)
	h.waitIdle()
	if h.comfy.Prompts() != 1 {
		t.Fatalf("ComfyUI got %d prompts, want 1", h.comfy.Prompts())
	}
}

// TestWaitBufferLimitChunkedBodies: a body without Content-Length is
// reserved chunk by chunk as it is read; when the budget runs out
// part-way, the request gets the busy answer and what it reserved is given
// back.
func TestWaitBufferLimitChunkedBodies(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "wait_buffer_limit 1MiB"})
	hold := h.takeHold(t, "test", "1m")
	first := make(chan result, 1)
	go func() { first <- h.postChunked(context.Background(), h.llm+"/api/chat", bigChat(700<<10)) }()
	st := h.waitStatus("the first chat waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	held := st.WaitBuffer.Bytes
	// 1, 2, 4 ... 512 KiB chunks: 1023 KiB reserved for 700 KiB.
	if held < 700<<10 || held > 1<<20 {
		t.Fatalf("a 700 KiB chunked body holds %d bytes", held)
	}
	r := h.postChunked(context.Background(), h.llm+"/v1/chat/completions", bigChat(700<<10))
	var e struct {
		Error struct{ Code, Message string }
	}
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
		json.Unmarshal([]byte(r.body), &e) != nil || e.Error.Code != "gpu_busy" {
		t.Fatalf("second chat: %d %s", r.status, r.body)
	}
	if got := h.ts().status().WaitBuffer.Bytes; got != held {
		t.Fatalf("after the refusal %d bytes held, want the first request's %d: the partial reservation was not given back", got, held)
	}
	h.releaseHold(t, hold)
	if r := <-first; r.status != http.StatusOK || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("first chat after the hold: %d %.300s", r.status, r.body)
	}
	h.waitIdle()
	if got := h.ts().status().WaitBuffer; got.Bytes != 0 || got.Peak > 1<<20 {
		t.Fatalf("wait_buffer after the run %+v", got)
	}
}

// countingReader counts what the client's transport read of a body.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestRefusedBodiesAreDrainedUnlessTheClientWaitsForContinue: a refused
// request's body is read and dropped, so that a client that sends all of
// it before reading gets the busy answer, not a broken connection; a
// client that sent Expect: 100-continue is answered without sending it.
func TestRefusedBodiesAreDrainedUnlessTheClientWaitsForContinue(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "wait_buffer_limit 1MiB"})
	hold := h.takeHold(t, "test", "1m")
	first := h.postAsync(context.Background(), h.llm+"/api/chat", bigChat(1<<20))
	h.waitStatus("the budget full", func(st Status) bool { return st.LLMWaiting == 1 && st.WaitBuffer.Bytes == 1<<20 })
	for _, expect := range []bool{false, true} {
		body := &countingReader{r: strings.NewReader(bigChat(4 << 20))}
		req, _ := http.NewRequest(http.MethodPost, h.llm+"/api/chat", body)
		req.ContentLength = 4 << 20
		client := h.client
		if expect {
			req.Header.Set("Expect", "100-continue")
			// Past this the client sends its body anyway, and the test fails.
			client = &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("expect=%v: %v (a refused body closed under the client)", expect, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("expect=%v: %d", expect, resp.StatusCode)
		}
		if sent := body.n.Load(); expect && sent != 0 || !expect && sent != 4<<20 {
			t.Fatalf("expect=%v: the client sent %d bytes of its 4 MiB body", expect, sent)
		}
	}
	h.releaseHold(t, hold)
	if r := <-first; r.status != http.StatusOK {
		t.Fatalf("waiting chat: %d", r.status)
	}
	h.waitIdle()
}

// TestMaxWaiting: with max_waiting 2, a third request gets the busy answer
// at once, in its API's shape; the two that wait are served.
func TestMaxWaiting(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "max_waiting 2\nllm_busy_status 429", comfy: comfyOpts(10 * time.Millisecond)})
	hold := h.takeHold(t, "test", "1m")
	a := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	b := h.postAsync(context.Background(), h.image+"/prompt", promptBody(10))
	st := h.waitStatus("two waiting", func(st Status) bool { return st.LLMWaiting == 1 && st.ImageWaiting == 1 })
	if st.WaitingLimit != 2 {
		t.Fatalf("status waiting_limit %d", st.WaitingLimit)
	}
	r := h.post(context.Background(), h.llm+"/v1/chat/completions", `{"model":"llama3.2","messages":[]}`)
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "30" || json.Unmarshal([]byte(r.body), &e) != nil ||
		e.Error.Code != "gpu_busy" || e.Error.Type != "rate_limit_error" || !strings.Contains(e.Error.Message, "max_waiting") {
		t.Fatalf("third request: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	r = h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"type":"gpu_busy"`) {
		t.Fatalf("third prompt: %d %s", r.status, r.body)
	}
	h.releaseHold(t, hold)
	if r := <-a; r.status != http.StatusOK {
		t.Fatalf("waiting chat: %d %s", r.status, r.body)
	}
	promptID(t, <-b)
	h.waitIdle()
}

// TestRequestBodyMaxSizeComesFirst: Caddy's request_body max_size runs
// before the turnstile (Caddy's directive order), so a body over it gets
// Caddy's 413 and never holds the budget, whether its size is announced
// or found while reading. Matched to the GPU routes as docs/behaviour.md shows,
// it leaves other routes alone.
func TestRequestBodyMaxSizeComesFirst(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cf := strings.Replace(h.caddyfile(harnessOptions{}), "\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL,
		"\t@gpu path /api/generate /api/chat /api/embed /api/embeddings /v1/*\n\trequest_body @gpu {\n\t\tmax_size 1MB\n\t}\n"+
			"\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL, 1)
	if cf == h.caddyfile(harnessOptions{}) {
		t.Fatal("request_body not inserted")
	}
	h.load(cf)
	hold := h.takeHold(t, "test", "1m")
	if r := h.post(context.Background(), h.llm+"/api/chat", bigChat(2<<20)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB body with Content-Length: %d %v %.200s", r.status, r.err, r.body)
	}
	if r := h.postChunked(context.Background(), h.llm+"/api/chat", bigChat(2<<20)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB chunked body: %d %v %.200s", r.status, r.err, r.body)
	}
	if got := h.ts().status().WaitBuffer.Bytes; got != 0 {
		t.Fatalf("%d bytes held after the 413s", got)
	}
	show := `{"model":"llama3.2","pad":"` + strings.Repeat("s", 2<<20) + `"}`
	if r := h.post(context.Background(), h.llm+"/api/show", show); r.status != http.StatusOK {
		t.Fatalf("2 MiB body on a route request_body does not match: %d %.200s", r.status, r.body)
	}
	small := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("a small chat waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	h.releaseHold(t, hold)
	if r := <-small; r.status != http.StatusOK {
		t.Fatalf("small chat: %d %s", r.status, r.body)
	}
	h.waitIdle()
	if got := h.ollama.Requests(); got != 1 {
		t.Fatalf("Ollama got %d requests, want 1", got)
	}
}

// bareTurnstile is a turnstile without Caddy, held by an external hold,
// with its warnings observed.
func bareTurnstile(t testing.TB, s Settings) (*turnstile, *observer.ObservedLogs) {
	s.SetShorthand("ollama", "http://127.0.0.1:1")
	c, err := tcfg.Validate(s)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTurnstile("bare")
	ts.cfgp.Store(c)
	core, logs := observer.New(zap.WarnLevel)
	ts.logp.Store(zap.New(core))
	// The GPU's orchestration has no engines: only the hold matters here.
	ts.orch().Apply(&gpu.Config{}, zap.NewNop())
	if _, err := ts.orch().TakeHold(context.Background(), "test", time.Hour); err != nil {
		t.Fatal(err)
	}
	return ts, logs
}

// bodyRequest is an LLM request with body, of unknown length if chunked.
func bodyRequest(body []byte, chunked bool) *http.Request {
	if chunked {
		return httptest.NewRequest("POST", "/api/chat", struct{ io.Reader }{bytes.NewReader(body)})
	}
	return httptest.NewRequest("POST", "/api/chat", bytes.NewReader(body))
}

// TestWaitBudgetSettingsInJSON: JSON configs get the Caddyfile's checks,
// with the JSON field's name in the message.
func TestWaitBudgetSettingsInJSON(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"wait_buffer_limit", "-1"}, {"wait_buffer_limit", "2199023255552"}, {"max_waiting", "-3"},
	} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1","%s":%s}}}}}`, tc.field, tc.value)
		err := caddy.Load([]byte(cfg), true)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %s: %v, want an error naming %s", tc.field, tc.value, err, tc.field)
		}
	}
}

// BenchmarkWaitingRequestMemory measures what one waiting LLM request adds
// to the heap (its buffered body and the turnstile's bookkeeping) and to
// the goroutine stacks, without Caddy around the middleware; the requests
// wait behind a hold, n at a time. heap-MiB is the whole growth: with
// 8 MiB bodies only what the default wait_buffer_limit admits waits, the
// rest is turned away, and the growth stays at the limit.
func BenchmarkWaitingRequestMemory(b *testing.B) {
	cases := []struct {
		name    string
		n, size int
		chunked bool
	}{
		{"small=1KiB", 2000, 1 << 10, false},
		{"small-chunked=1KiB", 2000, 1 << 10, true},
		{"large=1MiB", 100, 1 << 20, false},
		{"large=8MiB", 100, 8 << 20, false},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			body := bytes.Repeat([]byte("a"), tc.size)
			drain := caddyhttp.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
				_, err := io.Copy(io.Discard, r.Body)
				return err
			})
			var heap, stack, total, admitted float64
			for b.Loop() {
				ts, _ := bareTurnstile(b, Settings{})
				h := &Handler{class: route.LLM, ts: ts}
				reqs := make([]*http.Request, tc.n)
				for i := range reqs {
					r := bodyRequest(body, tc.chunked)
					reqs[i] = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
				}
				done := make(chan int, tc.n)
				heap0, stack0 := memInUse()
				for _, r := range reqs {
					go func() {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r, drain)
						done <- w.Code
					}()
				}
				// Wait until every request either waits or was turned away.
				refused := 0
				for {
					changed := ts.orch().Changed()
					if ts.orch().Status().LLMWaiting+refused == tc.n {
						break
					}
					select {
					case <-done:
						refused++
					case <-changed:
					}
				}
				waiting := tc.n - refused
				heap1, stack1 := memInUse()
				total = float64(heap1-heap0) / (1 << 20)
				heap = float64(heap1-heap0) / float64(waiting)
				stack = float64(stack1-stack0) / float64(waiting)
				admitted = float64(waiting)
				ts.orch().FindHold(ts.orch().Status().Holds[0].ID).End("released")
				for range waiting {
					if code := <-done; code != http.StatusOK {
						b.Fatalf("a waiting request ended with %d", code)
					}
				}
			}
			b.ReportMetric(heap, "heap-B/waiter")
			b.ReportMetric(stack, "stack-B/waiter")
			b.ReportMetric(total, "heap-MiB")
			b.ReportMetric(admitted, "waiting")
		})
	}
}

// memInUse is the live heap and the goroutine stacks, after a collection.
func memInUse() (heap, stack int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.StackInuse)
}
