package turnstile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// ready asks the status handler at base for readiness with query (e.g.
// "ready=llm"), with accept as the Accept header if not "", and checks
// that the answer is the status JSON.
func (h *harness) ready(method, base, query, accept string) result {
	h.t.Helper()
	req, _ := http.NewRequest(method, base+"/healthz?"+query, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	r := h.send(req)
	if r.err != nil {
		h.t.Fatalf("%s ?%s: %v", method, query, r.err)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		h.t.Fatalf("%s ?%s (Accept %q): Content-Type %q, want the status JSON: %s", method, query, accept, ct, r.body)
	}
	if method == http.MethodGet {
		var st Status
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.State == "" {
			h.t.Fatalf("?%s: not the status JSON: %s", query, r.body)
		}
	}
	return r
}

// A hold is an exclusive holder: neither an LLM request nor an image job
// would be let through, whatever the spelling of the class, the method
// (HEAD) or what the client accepts (a browser's text/html).
func TestReadyDuringAHold(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	for _, q := range []string{"ready=llm", "ready=image", "ready=LLM", "ready=Image&view=json"} {
		if r := h.ready("GET", h.llm, q, ""); r.status != http.StatusOK {
			t.Fatalf("?%s when idle: %d %s", q, r.status, r.body)
		}
	}
	hold := h.takeHold(t, "game", "1m")
	for _, q := range []string{"ready=llm", "ready=image", "ready=LLM", "ready=iMaGe"} {
		for _, accept := range []string{"", "text/html", "text/event-stream"} {
			if r := h.ready("GET", h.llm, q, accept); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"state":"hold"`) {
				t.Fatalf("?%s (Accept %q) during a hold: %d %s, want 503 with the status", q, accept, r.status, r.body)
			}
		}
		if r := h.ready("HEAD", h.image, q, ""); r.status != http.StatusServiceUnavailable || r.body != "" {
			t.Fatalf("HEAD ?%s during a hold: %d %q, want 503 and no body", q, r.status, r.body)
		}
	}
	h.releaseHold(t, hold)
	h.waitIdle()
	if r := h.ready("HEAD", h.llm, "ready=llm", "text/html"); r.status != http.StatusOK {
		t.Fatalf("HEAD ?ready=llm after the hold: %d", r.status)
	}
}

// An engine that is not running makes its class not ready.
func TestReadyWithNoEngineRunning(t *testing.T) {
	dead := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	h := newHarness(t, harnessOptions{ollamaURL: dead, comfyURL: dead})
	h.waitIdle()
	for _, q := range []string{"ready=llm", "ready=image"} {
		if r := h.ready("GET", h.llm, q, ""); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"reachable":false`) {
			t.Fatalf("?%s with no engine running: %d %s, want 503", q, r.status, r.body)
		}
	}
}

// A forward that the engine refused makes its class not ready at once,
// within the window in which an earlier contact would vouch for it.
func TestReadyAfterARefusedForward(t *testing.T) {
	up := newHarness(t, harnessOptions{})
	up.waitIdle()
	if r := up.ready("GET", up.llm, "ready=llm", ""); r.status != http.StatusOK {
		t.Fatalf("?ready=llm with Ollama up: %d %s", r.status, r.body)
	}
	up.ollama.Close()
	if r := up.post(t.Context(), up.llm+"/api/chat", chatBody("llama3.2", false)); r.status != http.StatusBadGateway {
		t.Fatalf("chat to a stopped Ollama: %d %s", r.status, r.body)
	}
	if r := up.ready("GET", up.llm, "ready=llm", ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("?ready=llm just after a refused forward: %d %s, want 503", r.status, r.body)
	}
	if r := up.ready("GET", up.llm, "ready=image", ""); r.status != http.StatusOK {
		t.Fatalf("?ready=image with ComfyUI up: %d %s", r.status, r.body)
	}
}

// A status query the handler does not know is refused, naming what it
// knows, rather than answered as something else.
func TestStatusQueryRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for q, want := range map[string]string{
		"view=bogus":            "want json, html, events or history",
		"ready=bogus":           "want llm or image",
		"ready=":                "want llm or image",
		"ready=llm&view=html":   "a readiness check answers the JSON",
		"ready=image&view=page": "want json, html, events or history",
	} {
		r := h.do("GET", h.llm+"/healthz?"+q, "")
		var e struct{ Error string }
		if r.status != http.StatusBadRequest || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Error, want) {
			t.Errorf("?%s: %d %s, want 400 with %q", q, r.status, r.body, want)
		}
	}
}
