package turnstile

import (
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"

	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

const misroutedSeries = `gpu_turnstile_misrouted_total{turnstile="default"}`

// A site that guards with gpu_turnstile but proxies to another Ollama
// than the turnstile's: it is served, counted, and named in the status
// until a config that fixes it loads.
func TestMisroutedSiteIsSeen(t *testing.T) {
	// Another Ollama, on a GPU of its own: not the engine the turnstile
	// empties before an image job.
	other := ollamatest.NewServer(gputest.New(), ollamatest.Options{})
	defer other.Close()
	otherAddr := hostOf(t, other.URL)
	h := newHarness(t, harnessOptions{edit: func(cf string) string {
		return strings.Replace(cf, "reverse_proxy "+h0URL(cf)+" {", "reverse_proxy "+other.URL+" {", 1)
	}})
	ctx := context.Background()
	before := h.metric(t, misroutedSeries)
	for i := range 3 {
		if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
			t.Fatalf("chat %d through the misrouted site: %d %s %v", i, r.status, r.body, r.err)
		}
	}
	if got := h.metric(t, misroutedSeries) - before; got != 3 {
		t.Fatalf("misrouted +%v after 3 chats, want +3", got)
	}
	// Passthrough is not guarded, so not counted.
	h.do("GET", h.llm+"/api/tags", "")
	if got := h.metric(t, misroutedSeries) - before; got != 3 {
		t.Fatalf("misrouted +%v after a passthrough request, want +3 still", got)
	}
	st := h.status()
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], otherAddr) {
		t.Fatalf("status warnings %q, want one naming %s", st.Warnings, otherAddr)
	}
	// The image site proxies to the turnstile's ComfyUI: no warning of
	// its own.
	promptID(t, h.post(ctx, h.image+"/prompt", promptBody(20)))
	h.waitIdle()
	if st := h.status(); len(st.Warnings) != 1 {
		t.Fatalf("status warnings %q after a well routed job, want the one", st.Warnings)
	}

	// The fixed config: no warning, and chats are not counted.
	h.load(h.caddyfile(harnessOptions{}))
	if st := h.status(); st.Warnings != nil {
		t.Fatalf("status warnings %q after a config that fixes the route, want none", st.Warnings)
	}
	fixed := h.metric(t, misroutedSeries)
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat after the fix: %d %s", r.status, r.body)
	}
	if got := h.metric(t, misroutedSeries); got != fixed {
		t.Fatalf("misrouted moved from %v to %v after the fix", fixed, got)
	}
}

// gpu_turnstile_proxy takes the engine's URL from the global options:
// nothing is misrouted, chats stream, image jobs hold the GPU, and a
// POST /prompt to the Ollama site is no image job.
func TestProxyDirectiveRoutesToTheEngine(t *testing.T) {
	llmSite := regexp.MustCompile(`gpu_turnstile\n\treverse_proxy \S+ \{\n\t\tflush_interval -1\n\t\}`)
	imageSite := regexp.MustCompile(`gpu_turnstile\n\treverse_proxy \S+\n`)
	h := newHarness(t, harnessOptions{comfy: comfyOpts(0), settings: "llm_busy_mode reject", edit: func(cf string) string {
		cf = llmSite.ReplaceAllString(cf, "gpu_turnstile_proxy ollama")
		cf = imageSite.ReplaceAllString(cf, "gpu_turnstile_proxy comfyui\n")
		if strings.Count(cf, "gpu_turnstile_proxy") != 2 {
			t.Fatalf("the harness's Caddyfile changed; the sites were not rewritten:\n%s", cf)
		}
		return cf
	}})
	ctx := context.Background()
	before := h.metric(t, misroutedSeries)

	finish := h.streamStart(ctx, "/api/chat", chatBody("llama3.2", true)) // flush_interval -1: the first line comes at once
	if r := finish(); r.status != 200 || r.err != nil {
		t.Fatalf("streamed chat: %d %v", r.status, r.err)
	}
	// Not an image job: Ollama keeps its model, and answers for itself.
	if r := h.post(ctx, h.llm+"/prompt", promptBody(20)); r.status != 404 {
		t.Fatalf("POST /prompt to Ollama: %d %s, want Ollama's 404", r.status, r.body)
	}
	if n := count(h.gpu.Events(), "ollama", "unload requested"); n != 0 {
		t.Fatalf("a POST /prompt to the Ollama site emptied Ollama (%d unloads): it was taken for an image job", n)
	}
	// Nor is a chat to the ComfyUI site LLM work: during a hold it gets
	// ComfyUI's own answer, not the turnstile's busy one.
	hold := h.takeHold(t, "test", "1m")
	if r := h.post(ctx, h.image+"/api/chat", chatBody("llama3.2", false)); r.status == 503 || strings.Contains(r.body, "gpu_turnstile") {
		t.Fatalf("POST /api/chat to ComfyUI during a hold: %d %s, want ComfyUI's answer", r.status, r.body)
	}
	h.releaseHold(t, hold)
	h.waitIdle()
	promptID(t, h.post(ctx, h.image+"/prompt", promptBody(20)))
	h.waitIdle()
	if n := count(h.gpu.Events(), "ollama", "unload requested"); n == 0 {
		t.Fatal("the image job on the ComfyUI site did not empty Ollama first")
	}
	if got := h.metric(t, misroutedSeries) - before; got != 0 {
		t.Fatalf("misrouted +%v through gpu_turnstile_proxy, want 0", got)
	}
	if st := h.status(); st.Warnings != nil {
		t.Fatalf("status warnings %q, want none", st.Warnings)
	}
}

// h0URL is the turnstile's Ollama URL in a harness Caddyfile.
func h0URL(cf string) string {
	return regexp.MustCompile(`ollama "([^"]*)"`).FindStringSubmatch(cf)[1]
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// Through one handler: every one of the first route.Always misrouted
// requests is counted, then one in route.Every; the upstream is logged
// once, at error.
func TestMisroutedCountedThenSampled(t *testing.T) {
	c, err := tcfg.Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTurnstile("misroute-unit")
	t.Cleanup(func() { ts.Destruct() })
	ts.cfgp.Store(c)
	core, logs := observer.New(zapcore.InfoLevel)
	ts.logp.Store(zap.New(core))
	h := &Handler{class: route.Auto, ts: ts, guard: c.Routes}
	to := func(upstream string) *http.Request {
		r := benchRequest("POST", "/api/chat")
		r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer).Set(upstreamVar, upstream)
		return r
	}
	before := counterValue(t, ts.metrics.Misrouted)
	for range 200 {
		if err := h.ServeHTTP(httptest.NewRecorder(), to("127.0.0.1:9"), nopNext); err != nil {
			t.Fatal(err)
		}
	}
	h.ServeHTTP(httptest.NewRecorder(), to("localhost:1"), nopNext) // the engine
	// 100 checked one by one, then the 128th and the 192nd.
	if got := counterValue(t, ts.metrics.Misrouted) - before; got != route.Always+2 {
		t.Fatalf("misrouted +%v after 200 misrouted requests, want +%d", got, route.Always+2)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 || errs[0].ContextMap()["upstream"] != "127.0.0.1:9" {
		t.Fatalf("error logs %+v, want one naming 127.0.0.1:9", errs)
	}
	if st := ts.status(); len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], "127.0.0.1:9") {
		t.Fatalf("warnings %q", st.Warnings)
	}
}

// upstreamVar is the placeholder in which Caddy's reverse_proxy puts the
// host:port of the upstream it chose for the request (httpapi.Upstream).
const upstreamVar = "http.reverse_proxy.upstream.hostport"
