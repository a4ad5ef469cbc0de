package turnstile

import (
	"errors"
	"net/http"
	"testing"
)

// reachableIn is the named engine's reachable in st: nil while unknown.
func reachableIn(st Status, name string) *bool {
	for _, e := range st.Engines {
		if e.Name == name {
			return e.Reachable
		}
	}
	return nil
}

// An engine that answered but could not confirm its emptying (Ollama
// accepts the unloads and never carries them out) was reached: its
// status says so, through the refused job and after it.
func TestReachableAfterAFailedConfirmation(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "unload_timeout 300ms"})
	if r := h.post(t.Context(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != http.StatusOK {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.ollama.SetUnloadStuck(true)
	if r := h.post(t.Context(), h.image+"/prompt", promptBody(10)); r.status != http.StatusServiceUnavailable {
		t.Fatalf("job with an unload that never happens: %d %s, want 503", r.status, r.body)
	}
	st := h.waitStatus("the GPU back after the refused job", func(st Status) bool { return st.State != "image" && st.Job == nil })
	if r := reachableIn(st, "ollama"); r == nil || !*r {
		t.Fatalf("ollama reachable %v after answering every call of a failed emptying, want true", r)
	}
	h.ollama.SetUnloadStuck(false)
}

// A forward that was answered is a contact: an engine counted unreachable
// (a failed forward, a probe) is reachable again after it, not only at
// the next call the turnstile makes itself.
func TestReachableAgainAfterAnAnsweredForward(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	if r := h.post(t.Context(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != http.StatusOK {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.ts().gpu.NoteUnreachable("ollama", errors.New("connection reset by peer"))
	h.waitStatus("ollama unreachable", func(st Status) bool {
		r := reachableIn(st, "ollama")
		return r != nil && !*r
	})
	if r := h.post(t.Context(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != http.StatusOK {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.waitStatus("ollama reachable after the chat was answered", func(st Status) bool {
		r := reachableIn(st, "ollama")
		return r != nil && *r
	})
}
