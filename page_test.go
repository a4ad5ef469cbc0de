package turnstile

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi/browsertest"
)

func TestPageHeadersAndCSP(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	req, _ := http.NewRequest("GET", h.llm+"/healthz", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(csp, "default-src 'none'") ||
		strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "script-src 'sha256-") {
		t.Fatalf("page: %s, CSP %q", resp.Header.Get("Content-Type"), csp)
	}
	if r := h.do("GET", h.llm+"/healthz?view=json", ""); !strings.HasPrefix(r.body, `{"state":`) {
		t.Fatalf("?view=json: %s", r.body)
	}
	// The page carries no data from the request: nothing can be reflected.
	r := h.do("GET", h.llm+"/healthz?view=html&x=<script>alert(1)</script>", "")
	if strings.Contains(r.body, "alert(1)") {
		t.Fatal("request data echoed into the page")
	}
}

// TestStatusPageInABrowser loads the page in headless Chromium through a
// real Caddy, under the page's own CSP, and watches it follow the GPU from
// llm to image and back without a reload: on the event stream, and by
// polling in a browser without EventSource.
func TestStatusPageInABrowser(t *testing.T) {
	t.Run("stream", func(t *testing.T) { testStatusPage(t, false) })
	t.Run("polling", func(t *testing.T) { testStatusPage(t, true) })
}

func testStatusPage(t *testing.T, polling bool) {
	if browsertest.Find() == "" {
		t.Skip("no Chromium found (Debian package chromium); .ci/run installs it")
	}
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	ctx, problems := browsertest.New(t)
	poll := func(expr string) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)))
		return err
	}
	waitState := func(want string) error {
		return poll(`document.getElementById("state").textContent === "` + want + `"`)
	}
	text := func(sel string) string {
		s, _ := chromedp.Run(ctx, chromedp.Text(sel))
		return s
	}

	if polling {
		// A browser without EventSource; the page must poll instead.
		if _, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument,
				page.AddScriptToEvaluateOnNewDocumentParams{Source: "delete window.EventSource;"})
			return chromedp.Void{}, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	mode := "(stream)"
	if polling {
		mode = "(polling)"
	}

	resume := h.ollama.HoldChats()
	finish := h.streamStart(context.Background(), "/api/chat", chatBody("llama3.2", true))
	if _, err := chromedp.Run(ctx, chromedp.Navigate(h.llm+"/healthz?view=html")); err != nil {
		t.Fatal(err)
	}
	if err := waitState("LLM"); err != nil {
		t.Fatalf("page never showed LLM (a blocked script shows nothing): %v; problems %v", err, problems())
	}
	if err := poll(`document.getElementById("conn").textContent.includes("` + mode + `")`); err != nil {
		t.Fatalf("the page is not live %s: %v; %q", mode, err, text("#conn"))
	}
	if err := poll(`document.getElementById("waiting").textContent.includes("Bodies buffered0 B of 256 MiB")`); err != nil {
		t.Fatalf("the page does not show the wait buffer: %v; %q", err, text("#waiting"))
	}
	img := h.postAsync(context.Background(), h.image+"/api/prompt", promptBody(3_600_000))
	resume()
	finish()
	id := promptID(t, <-img)
	if err := waitState("IMAGE"); err != nil {
		t.Fatalf("page never showed IMAGE: %v", err)
	}
	summary := text("#summary")
	if !strings.Contains(summary, "image job") {
		t.Fatalf("summary %q", summary)
	}
	if err := poll(`document.getElementById("upstreams").textContent.includes("image comfyui: running, reachable, websocket up")`); err != nil {
		t.Fatalf("the page does not show the engines: %v; %q", err, text("#upstreams"))
	}
	// The live regions announce changes, not a clock: while the job's age
	// ticks, three renders, none of them changes.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.liveChanges = []; window.renders = 0;
		for (const e of document.querySelectorAll("[aria-live], [role=status], [role=alert], [role=log], [role=timer]"))
			new MutationObserver(() => liveChanges.push(e.id + ": " + e.textContent)).observe(e, {childList: true, characterData: true, subtree: true});
		new MutationObserver(() => renders++).observe(document.getElementById("holder"), {childList: true}); true`)); err != nil {
		t.Fatal(err)
	}
	if err := poll(`window.renders >= 3`); err != nil {
		t.Fatalf("the page does not tick: %v", err)
	}
	if changes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`liveChanges`)); err != nil || len(changes) > 0 {
		t.Fatalf("live regions changed while nothing happened: %q %v", changes, err)
	}
	// The site's /healthz is the public view: no prompt_id, no path.
	if got := text("#announce"); !strings.Contains(got, "GPU image, image job running") {
		t.Fatalf("announced %q", got)
	}
	waiting := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("qwen3:8b", false))
	if err := poll(`document.getElementById("waiters").textContent.includes("llm · qwen3:8b · waiting ")`); err != nil {
		t.Fatalf("the page does not list the waiting chat: %v; %q", err, text("#waiters"))
	}
	shot := screenshot(t, ctx, "status-page-image.png")
	h.interruptRunning(h.comfy.URL)
	<-waiting
	if err := waitState("IDLE"); err != nil {
		t.Fatalf("page did not come back to IDLE: %v", err)
	}
	if err := poll(`document.getElementById("announce").textContent === "GPU idle."`); err != nil {
		t.Fatalf("the change to idle is not announced: %q", text("#announce"))
	}
	if err := poll(`[...document.querySelectorAll("#segs rect title")].some(t => t.textContent.startsWith("image"))`); err != nil {
		t.Fatalf("the timeline does not show the job: %v", err)
	}
	if err := poll(`document.getElementById("jobs").textContent.includes("interrupted")`); err != nil {
		t.Fatalf("the jobs table does not show the job: %v", err)
	}
	if jobs := text("#jobs"); !strings.HasPrefix(jobs, "—\tproxy\t") || strings.Contains(jobs, id[:8]) {
		t.Fatalf("jobs table %q: want the job without its prompt_id %s", jobs, id[:8])
	}
	screenshot(t, ctx, "status-page-idle"+strings.Trim(mode, "()")+".png")
	if pr := problems(); len(pr) > 0 {
		t.Fatalf("page errors: %v", pr)
	}
	t.Logf("screenshots in %s", filepath.Dir(shot))
}

// screenshot saves a PNG as a test artefact: in $GPU_TURNSTILE_ARTIFACTS,
// or the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("GPU_TURNSTILE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStatusPageScreenshot makes the README's screenshot after a short
// varied scene. It runs only with GPU_TURNSTILE_SCREENSHOT=path.png.
func TestStatusPageScreenshot(t *testing.T) {
	out := os.Getenv("GPU_TURNSTILE_SCREENSHOT")
	chromium := browsertest.Find()
	if out == "" || chromium == "" {
		t.Skip("set GPU_TURNSTILE_SCREENSHOT=path.png (and install chromium) to make the README's screenshot")
	}
	h := newHarness(t, harnessOptions{settings: "warm_model llama3.2", comfy: comfyOpts(time.Hour)})
	ctx := context.Background()
	for round := range 3 {
		for range 4 {
			h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
		}
		time.Sleep(1200 * time.Millisecond)
		id := promptID(t, h.post(ctx, h.image+"/prompt", promptBody(3_600_000)))
		time.Sleep(time.Duration(2+round) * time.Second)
		if round < 2 {
			h.do("POST", h.comfy.URL+"/interrupt", `{"prompt_id":"`+id+`"}`)
			h.waitIdle()
		}
		if round == 0 {
			hold := h.takeHold(t, "steam", "5m")
			time.Sleep(2 * time.Second)
			h.releaseHold(t, hold)
			h.waitIdle()
		}
	}
	// Two chats wait behind the running job.
	for range 2 {
		go h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	}
	h.waitStatus("chats waiting", func(st Status) bool { return st.LLMWaiting == 2 })
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1100, 900))...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if _, err := chromedp.Run(bctx, chromedp.Navigate(h.llm+"/healthz?view=html")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("jobs").textContent.includes("interrupted")`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a second refresh, for a settled picture
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	h.interruptRunning(h.comfy.URL)
	h.waitIdle()
}
