package turnstile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestImageWaiterShowsItsClientsHash queues a ComfyUI prompt behind a hold,
// through Caddy: its waiter carries the first 16 hex digits of the SHA-256
// of its client_id, which a browser tab computes to find its own prompt,
// and neither the status nor its event stream shows the id.
func TestImageWaiterShowsItsClientsHash(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	hold := h.takeHold(t, "test", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const id = "tab-5d1c0e7a-secret"
	body := strings.Replace(promptBody(10), `"client_id":"browser"`, `"client_id":"`+id+`"`, 1)
	answer := h.postAsync(ctx, h.image+"/prompt", body)
	st := h.waitStatus("the prompt waiting", func(st Status) bool { return len(st.Waiters) == 1 })
	sum := sha256.Sum256([]byte(id))
	if w := st.Waiters[0]; w.Kind != "image" || w.Client != hex.EncodeToString(sum[:])[:16] {
		t.Fatalf("waiter %+v, want an image waiter with client %s", w, hex.EncodeToString(sum[:])[:16])
	}
	if r := h.do("GET", h.image+"/healthz", ""); strings.Contains(r.body, id) || !strings.Contains(r.body, `"client":"`) {
		t.Fatalf("the status shows the client_id, or no client: %s", r.body)
	}
	ev, _ := openEvents(t, h.client, h.image+"/healthz", "text/event-stream").next("a status with the waiter",
		func(ev sseEvent) bool { return ev.name == "status" && strings.Contains(ev.data, `"client":"`) })
	if strings.Contains(ev.data, id) {
		t.Fatalf("the event stream shows the client_id: %s", ev.data)
	}
	h.releaseHold(t, hold)
	if r := <-answer; r.status != 200 {
		t.Fatalf("prompt: %d %s", r.status, r.body)
	}
}
