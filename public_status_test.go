package turnstile

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestPublicStatusShowsNoPrivateFacts runs Caddy with a game on the GPU
// (a presence hold, gpu_busy, read from the simulated card's nvidia-smi)
// and an admin hold with an owner waiting behind it: every byte the site's
// status gives (JSON, readiness, history, page, event stream) is free of
// the game's name, its PID, the owner and the engines' addresses; the
// same site's `detail full` route and the admin endpoint show them all.
func TestPublicStatusShowsNoPrivateFacts(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "hold_while gpu_busy 20 for 1s\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 200ms",
		beforeLoad: smiOnPath})
	h.waitIdle()
	const game, owner = "fakegame-x.exe", "backup-of-alice"
	pid := strconv.Itoa(gameNotHere)
	var addrs []string
	for _, u := range []string{h.ollama.URL, h.comfy.URL} {
		pu, err := url.Parse(u)
		if err != nil || pu.Port() == "" {
			t.Fatalf("engine URL %q: want one with a port", u)
		}
		addrs = append(addrs, pu.Host, ":"+pu.Port())
	}
	private := append([]string{game, pid, owner}, addrs...)

	public := openEvents(t, h.client, h.llm+"/healthz?view=events", "")
	full := openEvents(t, h.client, h.llm+"/healthz/full?view=events", "")

	defer h.gpu.Busy(game, gameNotHere, "G", 60)()
	h.waitStatus("the game's hold", func(st Status) bool { return len(st.Holds) == 1 && st.Holds[0].Source == "presence" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.postAsync(ctx, h.admin+"/gpu_turnstile/holds", fmt.Sprintf(`{"turnstile":"default","owner":%q,"ttl":"1m"}`, owner))
	h.waitStatus("the admin hold waiting", func(st Status) bool { return st.HoldWaiting == 1 })

	// The streams up to the status that shows both.
	both := func(st Status) bool { return len(st.Holds) == 1 && st.HoldWaiting == 1 }
	stream := func(s *eventStream) string {
		ev, seen := s.next("the hold and its waiter", statusIs(both))
		var b strings.Builder
		for _, e := range append(seen, ev) {
			b.WriteString("event: " + e.name + "\ndata: " + e.data + "\n\n")
		}
		return b.String()
	}

	site := map[string]string{"event stream": stream(public)}
	for _, q := range []string{"", "?view=json", "?ready=llm", "?ready=image", "?view=history", "?view=html"} {
		r := h.do("GET", h.llm+"/healthz"+q, "")
		if r.status != 200 && r.status != 503 || r.body == "" {
			t.Fatalf("/healthz%s: %d %v", q, r.status, r.err)
		}
		site["/healthz"+q] = r.body
	}
	for where, body := range site {
		for _, s := range private {
			if strings.Contains(body, s) {
				t.Errorf("the site's %s shows %q:\n%s", where, s, body)
			}
		}
	}
	for _, s := range []string{`"state":"hold"`, `"hold_waiting":1`, `{"source":"presence"}`, `"condition":"gpu_busy","engaged":true`,
		`"waiters":[{"kind":"hold",`} {
		if !strings.Contains(site["/healthz"], s) {
			t.Errorf("the site's status lacks %s:\n%s", s, site["/healthz"])
		}
	}

	shown := map[string]string{
		"full status":       h.do("GET", h.llm+"/healthz/full", "").body,
		"full event stream": stream(full),
		"admin status":      h.do("GET", h.admin+"/gpu_turnstile/status", "").body,
	}
	for where, body := range shown {
		for _, s := range private {
			if !strings.Contains(body, s) {
				t.Errorf("the %s lacks %q:\n%s", where, s, body)
			}
		}
	}
}
