package turnstile

import (
	"context"
	"encoding/json"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func (h *harness) do(method, url, body string) result {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func TestStatusInEachState(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	ctx := context.Background()
	first3 := regexp.MustCompile(`^\{"state":"(idle|llm|image|hold)","llm_inflight":\d+,"image_pending":(true|false),`)
	check := func(want string, pending bool) Status {
		t.Helper()
		r := h.do("GET", h.llm+"/healthz/full", "")
		if !first3.MatchString(r.body) {
			t.Fatalf("status does not start with the seed's three fields: %s", r.body)
		}
		var st Status
		json.Unmarshal([]byte(r.body), &st)
		if st.State != want || st.ImagePending != pending {
			t.Fatalf("status %s, want state %s image_pending %v", r.body, want, pending)
		}
		return st
	}
	h.waitIdle()
	st := check("idle", false)
	if !*st.Upstreams["comfy"].Reachable || st.Upstreams["ollama"].URL != h.ollama.URL {
		t.Fatalf("upstreams %+v", st.Upstreams)
	}

	resume := h.ollama.HoldChats()
	finish := h.streamStart(ctx, "/api/chat", chatBody("llama3.2", true))
	if st := check("llm", false); st.LLMInflight != 1 {
		t.Fatalf("llm_inflight %d", st.LLMInflight)
	}
	img := h.postAsync(ctx, h.image+"/prompt", promptBody(3_600_000))
	h.waitStatus("image waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	check("llm", true)
	resume()
	finish()
	id := promptID(t, <-img)
	st = check("image", true)
	if st.Job == nil || st.Job.PromptID != id || st.Job.Phase != "running" || st.Job.AgeSeconds < 0 {
		t.Fatalf("job %+v, want the running job", st.Job)
	}
	if st.LastSwitch == nil {
		t.Fatal("no last_switch after LLM -> image")
	}
	if r := h.do("GET", h.llm+"/healthz?ready=llm", ""); r.status != 503 {
		t.Fatalf("?ready=llm during a job: %d", r.status)
	}
	h.interruptRunning(h.comfy.URL)
	h.waitIdle()

	hold := h.takeHold(t, "game", "1m")
	st = check("hold", false)
	if len(st.Holds) != 1 || st.Holds[0].Owner != "game" {
		t.Fatalf("holds %+v", st.Holds)
	}
	h.releaseHold(t, hold)
	h.waitIdle()
	if r := h.do("GET", h.llm+"/healthz?ready=llm", ""); r.status != 200 {
		t.Fatalf("?ready=llm when idle: %d", r.status)
	}
	// The admin answer lists every turnstile.
	r := h.do("GET", h.admin+"/gpu_turnstile/status", "")
	if r.status != 200 || !strings.Contains(r.body, `"turnstiles":{"default":{"state":"idle"`) || !strings.Contains(r.body, `"state":"idle"`) {
		t.Fatalf("admin status: %d %s", r.status, r.body)
	}
	// And the history shows what happened.
	r = h.do("GET", h.llm+"/healthz?view=history", "")
	for _, want := range []string{`"to":"image"`, `"to":"hold"`, `"outcome":"interrupted"`, `"kind":"unload"`, `"kind":"free"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("history lacks %s: %s", want, r.body)
		}
	}
}

func TestHoldLifecycle(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatal(r.status)
	}
	id := h.takeHold(t, "trainer", "1m")
	if len(h.ollama.Loaded()) != 0 {
		t.Fatalf("Ollama still has %v loaded once the hold was granted", h.ollama.Loaded())
	}
	if h.comfy.Frees() == 0 {
		t.Fatal("ComfyUI was not freed for the hold")
	}
	r := h.do("POST", h.admin+"/gpu_turnstile/holds/"+id+"/renew", `{"ttl":"5m"}`)
	if r.status != 200 || !strings.Contains(r.body, `"owner":"trainer"`) {
		t.Fatalf("renew: %d %s", r.status, r.body)
	}
	if r := h.do("POST", h.admin+"/gpu_turnstile/holds/"+id+"/renew", ``); r.status != 200 {
		t.Fatalf("renew without a body: %d %s", r.status, r.body)
	}
	r = h.do("GET", h.admin+"/gpu_turnstile/holds", "")
	if !strings.Contains(r.body, id) {
		t.Fatalf("hold list: %s", r.body)
	}
	h.releaseHold(t, id)
	h.waitIdle()
	if r := h.do("DELETE", h.admin+"/gpu_turnstile/holds/"+id, ""); r.status != 404 {
		t.Fatalf("second release: %d", r.status)
	}
	if r := h.do("POST", h.admin+"/gpu_turnstile/holds/"+id+"/renew", ""); r.status != 404 {
		t.Fatalf("renew of a released hold: %d", r.status)
	}
}

func TestHoldExpires(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.takeHold(t, "script", "200ms")
	waiting := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	if r := <-waiting; r.status != 200 {
		t.Fatalf("LLM after the hold expired: %d", r.status)
	}
	h.waitIdle()
	if got := counterValue(t, metrics.HoldEvents.WithLabelValues("default", "expired")); got < 1 {
		t.Fatal("expiry not counted")
	}
}

func TestHoldRequestCancelledWhileWaiting(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	first := h.takeHold(t, "first", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	ch := h.postAsync(ctx, h.admin+"/gpu_turnstile/holds", `{"owner":"second","ttl":"1m"}`)
	h.waitStatus("hold waiting", func(st Status) bool { return st.HoldWaiting == 1 })
	cancel()
	<-ch
	h.waitStatus("waiter gone", func(st Status) bool { return st.HoldWaiting == 0 })
	h.releaseHold(t, first)
	h.waitIdle()
	if st := h.ts().status(); len(st.Holds) != 0 {
		t.Fatalf("a cancelled hold request left a hold: %+v", st.Holds)
	}
}

func TestHoldsWaitTheirTurnWithImageJobs(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(100 * time.Millisecond)})
	first := h.takeHold(t, "first", "1m")
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(100))
	h.waitStatus("image waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	hold := h.postAsync(context.Background(), h.admin+"/gpu_turnstile/holds", `{"owner":"second","ttl":"1m"}`)
	h.waitStatus("hold waiting", func(st Status) bool { return st.HoldWaiting == 1 })
	h.releaseHold(t, first)
	promptID(t, <-img)
	r := <-hold
	if r.status != 201 {
		t.Fatalf("second hold: %d %s", r.status, r.body)
	}
	// The hold came after the image job: the job had ended first.
	if h.comfy.Reserved() != 0 {
		t.Fatal("hold granted while ComfyUI still held the job's models")
	}
	var out struct{ ID string }
	json.Unmarshal([]byte(r.body), &out)
	h.releaseHold(t, out.ID)
	h.waitIdle()
}

func TestAdminBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/gpu_turnstile/holds", ``, 400, "empty body"},
		{"POST", "/gpu_turnstile/holds", `{`, 400, "invalid JSON"},
		{"POST", "/gpu_turnstile/holds", `{"owner":"x","ttl":"2m","extra":1}`, 400, "unknown field"},
		{"POST", "/gpu_turnstile/holds", `{"owner":"x"} {}`, 400, "data after"},
		{"POST", "/gpu_turnstile/holds", `{"ttl":"soon"}`, 400, "ttl"},
		{"POST", "/gpu_turnstile/holds", `{"ttl":"-1m"}`, 400, "ttl"},
		{"POST", "/gpu_turnstile/holds", `{"ttl":"1000h"}`, 400, "ttl"},
		{"POST", "/gpu_turnstile/holds", `{"ttl":true}`, 400, "ttl"},
		{"POST", "/gpu_turnstile/holds", `{"turnstile":"gpu7"}`, 404, "gpu7"},
		{"POST", "/gpu_turnstile/holds", `{"owner":"` + strings.Repeat("x", 300) + `"}`, 400, "owner"},
		{"POST", "/gpu_turnstile/holds", `{"owner":"` + strings.Repeat("x", 70000) + `"}`, 413, "64 KiB"},
		{"PUT", "/gpu_turnstile/holds", `{}`, 405, "not allowed"},
		{"GET", "/gpu_turnstile/holds/abc", ``, 405, "not allowed"},
		{"DELETE", "/gpu_turnstile/holds/nope", ``, 404, "nope"},
		{"POST", "/gpu_turnstile/holds/nope/renew", ``, 404, "nope"},
		{"POST", "/gpu_turnstile/holds/nope/renew", `{"ttl":"x"}`, 404, "nope"},
		{"POST", "/gpu_turnstile/status", ``, 405, "not allowed"},
		{"GET", "/gpu_turnstile/nothing", ``, 404, "no such route"},
	}
	for _, tc := range cases {
		r := h.do(tc.method, h.admin+tc.path, tc.body)
		if r.status != tc.status || !strings.Contains(r.body, tc.want) {
			t.Errorf("%s %s %.40s: %d %s, want %d %q", tc.method, tc.path, tc.body, r.status, r.body, tc.status, tc.want)
		}
	}
	h.waitIdle()
}

func TestAdminRoutesAreNotOnTheProxiedListeners(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	r := h.do("POST", h.llm+"/gpu_turnstile/holds", `{"owner":"x"}`)
	if r.status == 201 || len(h.ts().status().Holds) != 0 {
		t.Fatal("a hold was taken through the proxied listener")
	}
}

func TestRetryAfterAuto(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "llm_busy_mode reject\nbusy_retry_after auto 10m"})
	h.takeHold(t, "game", "95s")
	r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	secs, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != 503 || secs < 90 || secs > 95 {
		t.Fatalf("Retry-After %q during a 95s hold, want about 95", r.header.Get("Retry-After"))
	}
}

func TestHoldWithoutWaiting(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	h.waitIdle()
	body := `{"owner":"game","ttl":"1m","wait":false}`
	blocked := func(what, state string) map[string]any {
		t.Helper()
		r := h.do("POST", h.admin+"/gpu_turnstile/holds", body)
		var out struct {
			Error     string         `json:"error"`
			BlockedBy map[string]any `json:"blocked_by"`
		}
		json.Unmarshal([]byte(r.body), &out)
		if r.status != 409 || out.Error == "" || out.BlockedBy["state"] != state {
			t.Fatalf("wait:false %s: %d %s, want 409 blocked by %s", what, r.status, r.body, state)
		}
		if _, ok := out.BlockedBy["job"]; !ok {
			t.Fatalf("blocked_by lacks job: %s", r.body)
		}
		if _, ok := out.BlockedBy["holds"].([]any); !ok {
			t.Fatalf("blocked_by lacks a holds list: %s", r.body)
		}
		if st := h.ts().status(); st.HoldWaiting != 0 {
			t.Fatalf("the refused request queued: %+v", st)
		}
		return out.BlockedBy
	}

	// An LLM request in flight: no waiting for it to drain.
	resume := h.ollama.HoldChats()
	finish := h.streamStart(context.Background(), "/api/chat", chatBody("llama3.2", true))
	if b := blocked("during LLM use", "llm"); b["job"] != nil || b["llm_inflight"] != float64(1) {
		t.Fatalf("blocked_by %v", b)
	}
	resume()
	finish()
	h.waitIdle()

	// An image job.
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(3_600_000))
	promptID(t, <-img)
	if b := blocked("during an image job", "image"); b["job"] == nil {
		t.Fatalf("blocked_by names no job: %v", b)
	}
	h.interruptRunning(h.comfy.URL)
	h.waitIdle()

	// Idle: granted at once.
	r := h.do("POST", h.admin+"/gpu_turnstile/holds", body)
	if r.status != 201 {
		t.Fatalf("wait:false when idle: %d %s", r.status, r.body)
	}
	var got struct{ ID string }
	json.Unmarshal([]byte(r.body), &got)
	if b := blocked("during a hold", "hold"); len(b["holds"].([]any)) != 1 {
		t.Fatalf("blocked_by %v, want the hold", b)
	}
	h.releaseHold(t, got.ID)
	h.waitIdle()
	if got := counterValue(t, metrics.HoldEvents.WithLabelValues("default", "busy")); got < 3 {
		t.Fatalf("busy refusals counted %v, want 3", got)
	}
}
