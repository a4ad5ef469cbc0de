package httpapi

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi/browsertest"
)

const gib = 1 << 30

// sampleVRAM is a 24 GiB card with 5 GiB free: two models loaded by
// Ollama (10.5 GiB), one by llama.cpp of unknown size, 5 GiB admitted but
// not yet seen loaded, so 3.5 GiB used by others; 2 GiB reserved.
func sampleVRAM(readAt time.Time) *gpu.VRAMStatus {
	return &gpu.VRAMStatus{
		TotalBytes: 24 * gib, FreeBytes: 5 * gib, ReserveBytes: 2 * gib, ReadAt: &readAt,
		Footprints: []gpu.FootprintStatus{
			{Engine: "ollama", Model: "llama3.2", Bytes: 9 * gib / 2, Source: "learned"},
			{Engine: "ollama", Model: "qwen3:8b", Bytes: 6 * gib, Source: "configured"},
			{Engine: "ollama", Model: "qwen3:32b", Bytes: 21 * gib, Source: "learned", Alone: true},
		},
		Loaded: []gpu.LoadedStatus{
			{Engine: "llamacpp", Model: "gemma3"},
			{Engine: "ollama", Model: "llama3.2", Bytes: 9 * gib / 2, Inflight: 1},
			{Engine: "ollama", Model: "qwen3:8b", Bytes: 6 * gib},
		},
		PendingBytes: 5 * gib,
		Job:          &gpu.JobMemoryStatus{Engine: "comfyui", Workflow: "comfyui:sdxl.safetensors@1024x1024x1", PeakBytes: 10 * gib, BesideBytes: 4 * gib},
	}
}

// vramPage is the status page in headless Chromium, polling (no
// EventSource) a server whose status carries the vram and waiters a test
// sets.
type vramPage struct {
	t        *testing.T
	ctx      context.Context
	problems func() []string

	mu      sync.Mutex
	vram    *gpu.VRAMStatus
	waiters []gpu.WaiterStatus
}

func newVRAMPage(t *testing.T) *vramPage {
	p := &vramPage{t: t}
	p.ctx, p.problems = browsertest.New(t)
	ts := testTurnstile("default")
	t.Cleanup(ts.orch().Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch r.URL.Query().Get("view") {
		case "json":
			st := ts.status()
			p.mu.Lock()
			st.VRAM, st.Waiters, st.LLMWaiting = p.vram, p.waiters, len(p.waiters)
			p.mu.Unlock()
			err = writeJSON(w, http.StatusOK, st)
		case "history":
			err = writeJSON(w, http.StatusOK, ts.History(time.Time{}))
		case "events":
			http.NotFound(w, r)
		default:
			err = servePage(w, false)
		}
		if err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	// Polling, so that each change of the served status shows within 1 s.
	openPolling(t, p.ctx, srv.URL+"/healthz")
	return p
}

// set changes the status the page is served.
func (p *vramPage) set(v *gpu.VRAMStatus, w []gpu.WaiterStatus) {
	p.mu.Lock()
	p.vram, p.waiters = v, w
	p.mu.Unlock()
}

// poll waits, 20 s at most, until the page's expr is true.
func (p *vramPage) poll(what, expr string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		p.t.Fatalf("%s: %v; page errors %v", what, err, p.problems())
	}
}

func (p *vramPage) eval(expr string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// shot keeps a screenshot in $GPU_TURNSTILE_ARTIFACTS, for a person to
// look at.
func (p *vramPage) shot(name string) {
	p.t.Helper()
	dir := os.Getenv("GPU_TURNSTILE_ARTIFACTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), png, 0o644)
	}
	if err != nil {
		p.t.Fatal(err)
	}
}

const timelineTop = `String(document.querySelector("[aria-labelledby=h-tl]").getBoundingClientRect().top)`

// TestPageShowsVRAM loads the page in headless Chromium, under its own
// CSP, with a status that gains a "vram" object and loses it again: the
// bar of the card's memory, the line under it, the running render, the
// footprints and the waiter waiting for memory; a stale reading, none;
// and without vram, the page as before.
func TestPageShowsVRAM(t *testing.T) {
	p := newVRAMPage(t)
	p.poll("the page never showed IDLE", `document.getElementById("state").textContent === "IDLE" && document.getElementById("conn").textContent.includes("polling")`)
	if got := p.eval(`String(document.getElementById("vram").hidden)`); got != "true" {
		t.Fatal("the memory section shows without vram")
	}
	top := p.eval(timelineTop)

	p.set(sampleVRAM(time.Now()), []gpu.WaiterStatus{
		{Kind: "llm", Since: time.Now(), Path: "/api/chat", Model: "qwen3:32b", WaitingFor: "vram"},
		{Kind: "llm", Since: time.Now(), Path: "/api/chat", Model: "llama3.2"},
	})
	p.poll("the memory section never showed", `!document.getElementById("vram").hidden && document.querySelectorAll("#vram-bar li").length > 0`)
	p.checkBar()
	p.checkLines()
	p.shot("status-page-vram.png")
	p.checkStale()
	p.shot("status-page-vram-stale.png")

	// No reading yet: no bar, a line that says so.
	p.set(&gpu.VRAMStatus{Stale: true, Footprints: []gpu.FootprintStatus{}, Loaded: []gpu.LoadedStatus{}}, nil)
	p.poll("no reading", `document.getElementById("vram-text").textContent === "No reading of the card's memory yet."`)
	if got := p.eval(`String(document.getElementById("vram-bar").getBoundingClientRect().height) + " " + document.getElementById("footprints").textContent`); got != "0 No footprint known yet." {
		t.Errorf("without a reading: %q", got)
	}

	// Without vram again, the page is as it was.
	p.set(nil, nil)
	p.poll("the memory section stays", `document.getElementById("vram").hidden`)
	if got := p.eval(timelineTop); got != top {
		t.Errorf("the timeline moved from %s to %s px without vram", top, got)
	}
	if pr := p.problems(); len(pr) > 0 {
		t.Fatalf("page errors: %v", pr)
	}
}

// checkBar checks sampleVRAM's bar: each segment's label, and its width
// as its share of the card.
func (p *vramPage) checkBar() {
	t := p.t
	t.Helper()
	segs := p.eval(`[...document.querySelectorAll("#vram-bar li")].map((li) => li.textContent).join(" | ")`)
	if want := "ollama/llama3.2 4.5 GiB, 1 in flight | ollama/qwen3:8b 6.0 GiB | loading 5.0 GiB | " +
		"other 3.5 GiB (with llamacpp/gemma3) | free 3.0 GiB | reserve 2.0 GiB"; segs != want {
		t.Errorf("bar:\n got %q\nwant %q", segs, want)
	}
	widths := p.eval(`(() => { const bar = document.getElementById("vram-bar").getBoundingClientRect().width - 2;
		return [...document.querySelectorAll("#vram-bar li")].map((li) => (li.getBoundingClientRect().width / bar * 24).toFixed(2)).join(" "); })()`)
	var sum float64
	for i, w := range strings.Fields(widths) {
		f, err := strconv.ParseFloat(w, 64)
		if err != nil {
			t.Fatalf("widths %q: %v", widths, err)
		}
		if want := []float64{4.5, 6, 5, 3.5, 3, 2}[i]; math.Abs(f-want) > 0.15 {
			t.Errorf("segment %d is %.2f GiB wide of 24, want %.1f (%s)", i, f, want, widths)
		}
		sum += f
	}
	if math.Abs(sum-24) > 0.2 {
		t.Errorf("the segments fill %.2f GiB of 24 (%s)", sum, widths)
	}
}

// checkLines checks sampleVRAM's line, render, footprints and waiters.
func (p *vramPage) checkLines() {
	t := p.t
	t.Helper()
	p.poll("the line", `/^5\.0 GiB free of 24\.0 GiB, reserve 2\.0 GiB, read \d+(\.\d)? s ago$/.test(document.getElementById("vram-line").textContent)`)
	if got := p.eval(`String(document.getElementById("vram-stale").hidden && document.getElementById("vram-error").hidden)`); got != "true" {
		t.Error("stale or error shown for a fresh reading")
	}
	if got, want := p.eval(`document.getElementById("vram-job").textContent`), "Render on comfyui (comfyui:sdxl.safetensors@1024x1024x1): peak 10.0 GiB learned; co_resident models may run beside it when they fit (4.0 GiB beside it now)"; got != want {
		t.Errorf("the render's line %q, want %q", got, want)
	}
	fp := p.eval(`[...document.querySelectorAll("#footprints tr")].map((tr) => [...tr.cells].map((td) => td.textContent).join(",")).join(" | ")`)
	if want := "llama3.2,ollama,4.5,learned,— | qwen3:8b,ollama,6.0,configured,— | qwen3:32b,ollama,21.0,learned,alone"; fp != want {
		t.Errorf("footprints:\n got %q\nwant %q", fp, want)
	}
	p.poll("the waiter waiting for memory", `document.getElementById("waiters").textContent.includes("llm /api/chat · qwen3:32b · waiting for memory ")`)
	if w := p.eval(`document.getElementById("waiters").children[1].textContent`); !strings.HasPrefix(w, "llm /api/chat · llama3.2 · waiting ") || strings.Contains(w, "memory") {
		t.Errorf("a waiter for the lock shows as %q", w)
	}
}

// checkStale checks a stale reading with an error.
func (p *vramPage) checkStale() {
	t := p.t
	t.Helper()
	v := sampleVRAM(time.Now().Add(-90 * time.Second))
	v.Stale, v.Error = true, "nvidia-smi: exit status 9"
	p.set(v, nil)
	p.poll("stale", `document.getElementById("vram-line").textContent.endsWith(" · stale: admission follows the whole-card rules")`)
	if got := p.eval(`document.getElementById("vram-error").textContent`); got != "Reading failed: nvidia-smi: exit status 9" {
		t.Errorf("error line %q", got)
	}
	if got := p.eval(`document.getElementById("vram-text").textContent`); !strings.Contains(got, ", read 1 min 3") {
		t.Errorf("line %q: the reading's age", got)
	}
}

// TestPageShowsThePublicView loads the page in headless Chromium on a
// public view (no owners, URLs or prompt_id): it still shows the state,
// whom the holds are for, the queue with each waiter's place and expected
// start, and the engines; nothing reads "undefined".
func TestPageShowsThePublicView(t *testing.T) {
	ctx, problems := browsertest.New(t)
	ts := testTurnstile("default")
	t.Cleanup(ts.orch().Close)
	st := secretStatus()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch r.URL.Query().Get("view") {
		case "json":
			now := time.Now()
			st.Since = now.Add(-time.Minute)
			in := now.Add(90 * time.Second)
			st.Waiters[0].Since, st.Waiters[0].ExpectedStart = now.Add(-5*time.Second), &in
			st.Waiters[1].Since = now.Add(-3 * time.Second)
			err = writeJSON(w, http.StatusOK, Public(st))
		case "history":
			err = writeJSON(w, http.StatusOK, PublicHistoryOf(ts.History(time.Time{})))
		case "events":
			http.NotFound(w, r)
		default:
			err = servePage(w, false)
		}
		if err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	openPolling(t, ctx, srv.URL+"/healthz")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("state").textContent === "HOLD"`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page never showed HOLD: %v; page errors %v", err, problems())
	}
	text := func(expr string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return s
	}
	if got := text(`document.getElementById("summary").textContent`); got != "Held for an external holder, the person at the machine." {
		t.Errorf("summary %q", got)
	}
	waiters := text(`[...document.getElementById("waiters").children].map((li) => li.textContent).join(" | ")`)
	if ok, _ := regexp.MatchString(`^hold · waiting \d(\.\d)? s · place 1 · expected to start in 1 min [23]\d s \| image · waiting \d(\.\d)? s · place 2$`, waiters); !ok {
		t.Errorf("waiters %q", waiters)
	}
	holder := text(`document.getElementById("holder").textContent`)
	for _, want := range []string{"Phaserunning", "Hold (presence)the person at the machine while present", "Holdan external holder until "} {
		if !strings.Contains(holder, want) {
			t.Errorf("who holds the GPU %q lacks %q", holder, want)
		}
	}
	if got := text(`document.getElementById("upstreams").textContent`); !strings.Contains(got, "ollamallm ollama: emptied, reachable") || strings.Contains(got, "—") {
		t.Errorf("engines %q", got)
	}
	if body := text(`document.body.innerText`); strings.Contains(body, "undefined") || strings.Contains(body, "secret") || strings.Contains(body, "null") {
		t.Errorf("the page reads:\n%s", body)
	}
	if pr := problems(); len(pr) > 0 {
		t.Fatalf("page errors: %v", pr)
	}
}

// openPolling opens the page at url in the browser of ctx without
// EventSource, so that it polls: each change of the served status shows
// within a second.
func openPolling(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument,
			page.AddScriptToEvaluateOnNewDocumentParams{Source: "delete window.EventSource;"})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
}
