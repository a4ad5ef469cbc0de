package turnstile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi/browsertest"
)

// runningJob posts a long prompt through Caddy and returns its prompt_id
// once ComfyUI runs it (ComfyUI drops an interrupt that comes before).
func (h *harness) runningJob(t *testing.T) string {
	t.Helper()
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitTimeline("job "+id+" start", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "job "+id+" start") >= 0
	})
	return id
}

// checkCancelled checks a cancel's answer, and that it came only once the
// engine had stopped the job: its end is on the timeline before the mark
// made when the answer arrived.
func (h *harness) checkCancelled(t *testing.T, r result, want, service, stopped string) {
	t.Helper()
	h.gpu.Mark("test", "cancel answered")
	if r.status != 200 || r.body != want+"\n" {
		t.Fatalf("cancel: %d %v %s, want 200 %s", r.status, r.err, r.body, want)
	}
	ev := h.gpu.Events()
	end := gputest.Index(ev, 0, service, stopped)
	if end < 0 || gputest.Index(ev, end, "test", "cancel answered") < 0 {
		t.Fatalf("the cancel answered before %q:\n%s", stopped, gputest.Dump(ev))
	}
}

// TestAdminCancelAnswersOnceTheJobHasStopped: ComfyUI stops an
// interrupted job only at its next node; the admin cancel answers after.
func TestAdminCancelAnswersOnceTheJobHasStopped(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: time.Hour, InterruptDelay: 300 * time.Millisecond}})
	id := h.runningJob(t)
	r := h.do("DELETE", h.admin+"/gpu_turnstile/job?turnstile=default", "")
	h.checkCancelled(t, r, `{"prompt_id":"`+id+`","engine":"comfyui","outcome":"interrupted"}`, "comfy", "job "+id+" end execution_interrupted")
	h.waitIdle()
	if hist := h.ts().gpu.History(time.Time{}).Jobs; len(hist) == 0 || hist[len(hist)-1].Outcome != "interrupted" {
		t.Fatalf("history jobs %+v, want the job interrupted", hist)
	}

	cases := []struct{ method, query, want string }{
		{"DELETE", "", `no image job runs (state idle)`}, // turnstile defaults to "default"
		{"DELETE", "?turnstile=gpu9", `no turnstile named \"gpu9\"`},
		{"GET", "", "method GET not allowed; use DELETE"},
	}
	for _, c := range cases {
		r := h.do(c.method, h.admin+"/gpu_turnstile/job"+c.query, "")
		if want := map[string]int{"DELETE": 404, "GET": 405}[c.method]; r.status != want || !strings.Contains(r.body, c.want) {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.query, r.status, r.body, want, c.want)
		}
	}
}

// A cancel while Ollama is emptied for the job: the prompt is never sent,
// and its client is told so.
func TestCancelBeforeThePromptIsSent(t *testing.T) {
	h := newHarness(t, harnessOptions{ollama: ollamatest.Options{UnloadDelay: time.Second}})
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	img := h.postAsync(ctx, h.image+"/prompt", promptBody(100))
	h.waitStatus("Ollama being emptied for the job", func(st Status) bool { return st.Job != nil && st.Job.Phase == "unloading" })
	r := h.do("DELETE", h.admin+"/gpu_turnstile/job", "")
	if want := `{"prompt_id":null,"engine":"comfyui","outcome":"cancelled"}` + "\n"; r.status != 200 || r.body != want {
		t.Fatalf("cancel: %d %s, want 200 %s", r.status, r.body, want)
	}
	if p := <-img; p.status != 409 || !strings.Contains(p.body, `"type":"job_cancelled"`) {
		t.Fatalf("the prompt's client got %d %s, want 409 job_cancelled", p.status, p.body)
	}
	if h.comfy.Prompts() != 0 {
		t.Fatal("the cancelled prompt reached ComfyUI")
	}
	h.waitIdle()
}

// The status handler cancels only with controls: the one on the LLM site
// has them, the one on the image site does not.
func TestStatusHandlerCancelsOnlyWithControls(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: time.Hour}, edit: func(cf string) string {
		return strings.Replace(cf, "gpu_turnstile_status\n", "gpu_turnstile_status {\n\t\t\tcontrols\n\t\t}\n", 1)
	}})
	with, without := h.llm+"/healthz", h.image+"/healthz"

	if r := h.do("DELETE", without+"?view=job", ""); r.status != 405 || r.header.Get("Allow") != "GET, HEAD" || !strings.Contains(r.body, "no `controls`") {
		t.Fatalf("DELETE without controls: %d %v %v %s", r.status, r.err, r.header, r.body)
	}
	if r := h.do("DELETE", with, ""); r.status != 400 || !strings.Contains(r.body, "?view=job") {
		t.Fatalf("DELETE without ?view=job: %d %v %s", r.status, r.err, r.body)
	}
	if r := h.do("DELETE", with+"?view=job", ""); r.status != 404 || !strings.Contains(r.body, `"error":"gpu_turnstile: turnstile \"default\": no image job runs`) {
		t.Fatalf("DELETE when idle: %d %s", r.status, r.body)
	}
	id := h.runningJob(t)
	r := h.do("DELETE", with+"?view=job", "")
	h.checkCancelled(t, r, `{"prompt_id":"`+id+`","engine":"comfyui","outcome":"interrupted"}`, "comfy", "job "+id+" end execution_interrupted")
	h.waitIdle()

	// The page shows its button only with controls.
	for url, want := range map[string]bool{with: true, without: false} {
		page := h.do("GET", url+"?view=html", "")
		if got := strings.Contains(page.body, `<body data-controls="on">`); got != want || !strings.Contains(page.body, `id="cancel"`) {
			t.Errorf("%s: page with controls %v, want %v", url, got, want)
		}
	}
}

// An A1111 job is the request itself: the cancel answers once the request
// has ended, which is at the job's next step after the interrupt.
func TestCancelA1111Job(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"}})
	resume := m.a1111.HoldJobs() // the job computes until interrupted
	defer resume()
	img := m.postAsync(context.Background(), m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody())
	m.waitTimeline("the job running", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "a1111", "held after step 1") >= 0 })
	r := m.do("DELETE", m.admin+"/gpu_turnstile/job", "")
	m.checkCancelled(t, r, `{"prompt_id":null,"engine":"a1111","outcome":"interrupted"}`, "a1111", "end: interrupted")
	if r := <-img; r.status != 200 {
		t.Fatalf("txt2img: %d %s", r.status, r.body)
	}
	m.waitIdle()
}

func TestStatusControlsCaddyfile(t *testing.T) {
	cfg, err := adapt(t, globalBlock+":11434 {\n\tgpu_turnstile_status {\n\t\tcontrols\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	if s := jsonString(t, cfg); !strings.Contains(s, `{"controls":true,"handler":"gpu_turnstile_status"}`) {
		t.Fatalf("adapted: %s", s)
	}
	for input, want := range map[string]string{
		"gpu_turnstile_status {\n\t\tcontrols on\n\t}":            "controls takes no argument",
		"gpu_turnstile_status {\n\t\tcontrols\n\t\tcontrols\n\t}": "controls: given twice",
		"gpu_turnstile_holds {\n\t\tcontrols\n\t}":                `gpu_turnstile_holds: unknown option "controls"`,
	} {
		if _, err := adapt(t, globalBlock+":11434 {\n\t"+input+"\n}"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", input, err, want)
		}
	}
}

// TestStatusPageCancelButton clicks the page's "Cancel job" in headless
// Chromium, under the page's CSP: the button shows only on the page of a
// status handler with controls, and reports the job's end.
func TestStatusPageCancelButton(t *testing.T) {
	if browsertest.Find() == "" {
		t.Skip("no Chromium found (Debian package chromium); .ci/run installs it")
	}
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: time.Hour}, edit: func(cf string) string {
		return strings.Replace(cf, "gpu_turnstile_status\n", "gpu_turnstile_status {\n\t\t\tcontrols\n\t\t}\n", 1)
	}})
	ctx, _ := browsertest.New(t)
	// The page asks "Cancel the running image job?" and waits, as does
	// the click: another goroutine accepts.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	poll := func(expr string) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)))
		return err
	}
	id := h.runningJob(t)

	if _, err := chromedp.Run(ctx, chromedp.Navigate(h.image+"/healthz?view=html")); err != nil {
		t.Fatal(err)
	}
	if err := poll(`document.getElementById("state").textContent === "IMAGE"`); err != nil {
		t.Fatalf("page never showed IMAGE: %v", err)
	}
	if err := poll(`document.getElementById("controls").hidden`); err != nil {
		t.Fatal("the page without controls shows the cancel button")
	}

	if _, err := chromedp.Run(ctx, chromedp.Navigate(h.llm+"/healthz?view=html")); err != nil {
		t.Fatal(err)
	}
	if err := poll(`!document.getElementById("controls").hidden && !document.getElementById("cancel").hidden`); err != nil {
		t.Fatalf("the page with controls shows no cancel button during the job: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.ID("cancel"))); err != nil {
		t.Fatal(err)
	}
	if err := poll(`document.getElementById("cancel-result").textContent === "Job ` + id[:8] + ` stopped."`); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("cancel-result")))
		t.Fatalf("the page does not report the cancel: %v; %q", err, text)
	}
	if ev := h.gpu.Events(); gputest.Index(ev, 0, "comfy", "job "+id+" end execution_interrupted") < 0 {
		t.Fatalf("the job was not interrupted:\n%s", gputest.Dump(ev))
	}
	h.waitIdle()
}
