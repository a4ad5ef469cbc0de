package turnstile

import (
	"context"
	"encoding/json"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/store"
)

// launcherHash is bcrypt (cost 4, quick to check) of "launch-secret".
const launcherHash = "$2a$04$iLenRgmwoeYY8TwGYz7emOv6G1mnEHUSGHmkDedgE95i2zjNhWUmG"

// withHoldsSite adds `handle_path /gpu/* { basic_auth ...; gpu_turnstile_holds }`
// to the LLM-facing site of a harness Caddyfile.
func withHoldsSite(cf string) string {
	return strings.Replace(cf, "\thandle /healthz {", "\thandle_path /gpu/* {\n\t\tbasic_auth {\n\t\t\tlauncher "+launcherHash+
		"\n\t\t}\n\t\tgpu_turnstile_holds\n\t}\n\thandle /healthz {", 1)
}

func (h *harness) launcher(method, path, body string, auth bool) result {
	req, _ := http.NewRequest(method, h.llm+"/gpu"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.SetBasicAuth("launcher", "launch-secret")
	}
	return h.send(req)
}

func TestHoldsHandlerBehindBasicAuth(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.load(withHoldsSite(h.caddyfile(harnessOptions{})))
	h.waitIdle()
	if r := h.launcher("POST", "/holds", `{"owner":"steam","ttl":"1m"}`, false); r.status != 401 {
		t.Fatalf("without credentials: %d %s", r.status, r.body)
	}
	if st := h.ts().status(); len(st.Holds) != 0 || st.HoldWaiting != 0 {
		t.Fatalf("a refused request reached the GPU: %+v", st)
	}
	r := h.launcher("POST", "/holds", `{"owner":"steam","ttl":"1m"}`, true)
	if r.status != 201 {
		t.Fatalf("with credentials: %d %s", r.status, r.body)
	}
	var hold struct{ ID, Turnstile, Owner string }
	json.Unmarshal([]byte(r.body), &hold)
	if hold.ID == "" || hold.Turnstile != "default" || hold.Owner != "steam" {
		t.Fatalf("hold answer %s", r.body)
	}
	if st := h.ts().status(); st.State != "hold" {
		t.Fatalf("state %s after the hold was granted", st.State)
	}
	if r := h.launcher("GET", "/holds", "", true); r.status != 200 || !strings.Contains(r.body, hold.ID) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	// The admin endpoint sees the same hold.
	if r := h.do("GET", h.admin+"/gpu_turnstile/holds", ""); !strings.Contains(r.body, hold.ID) {
		t.Fatalf("admin list: %s", r.body)
	}
	if r := h.launcher("POST", "/holds/"+hold.ID+"/renew", `{"ttl":"10m"}`, true); r.status != 200 || !strings.Contains(r.body, `"owner":"steam"`) {
		t.Fatalf("renew: %d %s", r.status, r.body)
	}
	if r := h.launcher("POST", "/holds/"+hold.ID+"/renew", "", false); r.status != 401 {
		t.Fatalf("renew without credentials: %d", r.status)
	}
	if r := h.launcher("POST", "/holds", `{"owner":"second","wait":false}`, true); r.status != 409 || !strings.Contains(r.body, `"blocked_by":{"state":"hold"`) {
		t.Fatalf("wait:false while held: %d %s", r.status, r.body)
	}
	if r := h.launcher("DELETE", "/holds/"+hold.ID, "", false); r.status != 401 {
		t.Fatalf("delete without credentials: %d", r.status)
	}
	if r := h.launcher("DELETE", "/holds/"+hold.ID, "", true); r.status != 200 || !strings.Contains(r.body, `"released":true`) {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	h.waitIdle()
	if r := h.launcher("DELETE", "/holds/"+hold.ID, "", true); r.status != 404 || !strings.Contains(r.body, `"error":`) {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}
	if r := h.launcher("GET", "/holds", "", true); r.status != 200 || r.body != "{\"holds\":[]}\n" {
		t.Fatalf("list once released: %d %q", r.status, r.body)
	}
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM after the hold: %d", r.status)
	}
}

func TestHoldsHandlerBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.load(withHoldsSite(h.caddyfile(harnessOptions{})))
	h.waitIdle() // the start-up probe has given the GPU back
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/holds", `{"turnstile":"gpu1","owner":"x"}`, 400, `turnstile: \"gpu1\"`},
		{"POST", "/holds", `{"ttl":"soon"}`, 400, "ttl"},
		{"POST", "/holds", ``, 400, "empty body"},
		{"PUT", "/holds", `{}`, 405, "not allowed"},
		{"GET", "/status", ``, 404, "no such route"},
		{"POST", "/holds/nope/renew", ``, 404, "nope"},
	}
	for _, tc := range cases {
		r := h.launcher(tc.method, tc.path, tc.body, true)
		if r.status != tc.status || !strings.Contains(r.body, tc.want) || !strings.HasPrefix(r.body, `{"error":`) {
			t.Errorf("%s %s %.40s: %d %s, want %d %q", tc.method, tc.path, tc.body, r.status, r.body, tc.status, tc.want)
		}
	}
	// Naming its own turnstile is allowed (once the start-up probe has
	// given the GPU back: this hold does not wait).
	h.waitIdle()
	r := h.launcher("POST", "/holds", `{"turnstile":"default","owner":"x","wait":false}`, true)
	if r.status != 201 {
		t.Fatalf("naming the handler's turnstile: %d %s", r.status, r.body)
	}
	var out struct{ ID string }
	json.Unmarshal([]byte(r.body), &out)
	h.releaseHold(t, out.ID)
	h.waitIdle()
}

// withStorage returns a directory of its own for Caddy's storage, and the
// harness's Caddyfile with that storage: where holds are kept.
func (h *harness) withStorage() (dir, caddyfile string) {
	dir = h.t.TempDir()
	return dir, strings.Replace(h.caddyfile(harnessOptions{}), "\tpersist_config off\n",
		"\tpersist_config off\n\tstorage file_system {\n\t\troot "+dir+"\n\t}\n", 1)
}

// A hold survives a restart of Caddy: it is kept in Caddy's storage, taken
// again at start-up with the same id before any LLM request gets through,
// and its remaining ttl still ends it.
func TestHoldSurvivesRestart(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir, cf := h.withStorage()
	h.load(cf)
	h.waitIdle()
	id := h.takeHold(t, "trainer", "4s")
	before := h.ts().gpu.FindHold(id).Status()
	files, _ := filepath.Glob(filepath.Join(dir, "gpu_turnstile", "holds", "default", "*.json"))
	if len(files) != 1 || filepath.Base(files[0]) != id+".json" {
		t.Fatalf("saved holds %v, want %s.json", files, id)
	}

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if runtimeOf(defaultName) != nil {
		t.Fatal("the turnstile outlived Caddy")
	}
	h.load(cf)
	// The hold store is read on the turnstile's own goroutine; the GPU is
	// held for the start-up from the load on.
	st := h.waitStatus("the hold restored", func(st Status) bool { return len(st.Holds) > 0 || st.State == "idle" })
	if st.State != "hold" || len(st.Holds) != 1 || st.Holds[0].ID != id || st.Holds[0].Owner != "trainer" ||
		!st.Holds[0].ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("after the restart: state %s, holds %+v; want hold %s until %v", st.State, st.Holds, id, before.ExpiresAt)
	}
	start := time.Now()
	chat := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("LLM waiting for the restored hold", func(st Status) bool { return st.LLMWaiting == 1 })
	if r := h.do("GET", h.admin+"/gpu_turnstile/holds", ""); !strings.Contains(r.body, id) {
		t.Fatalf("admin list after the restart: %s", r.body)
	}
	r := <-chat
	if r.status != 200 {
		t.Fatalf("LLM after the restored hold: %d %s", r.status, r.body)
	}
	if time.Now().Before(before.ExpiresAt) {
		t.Fatalf("the LLM request got through %v before the restored hold's lease ended", time.Until(before.ExpiresAt))
	}
	t.Logf("LLM request waited %v for the restored hold", time.Since(start))
	h.waitIdle()
	if got := counterValue(t, metrics.HoldEvents.WithLabelValues("default", "expired")); got < 1 {
		t.Fatal("the restored hold's expiry was not counted")
	}
	files, _ = filepath.Glob(filepath.Join(dir, "gpu_turnstile", "holds", "default", "*.json"))
	if len(files) != 0 {
		t.Fatalf("an expired hold is still saved: %v", files)
	}
}

// A released hold is not taken again at the next start.
func TestReleasedHoldIsNotRestored(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir, cf := h.withStorage()
	h.load(cf)
	h.waitIdle()
	id := h.takeHold(t, "game", "1m")
	if r := h.do("POST", h.admin+"/gpu_turnstile/holds/"+id+"/renew", `{"ttl":"2m"}`); r.status != 200 {
		t.Fatalf("renew: %d %s", r.status, r.body)
	}
	data, err := os.ReadFile(filepath.Join(dir, "gpu_turnstile", "holds", "default", id+".json"))
	var rec store.HoldRecord
	json.Unmarshal(data, &rec)
	// ttl stays the lease a renewal without one gets; the renewal moved
	// the end.
	if err != nil || rec.ID != id || rec.Owner != "game" || rec.TTL != "1m0s" || time.Until(rec.ExpiresAt) < 90*time.Second {
		t.Fatalf("saved record after the renewal: %s %v", data, err)
	}
	h.releaseHold(t, id)
	h.waitIdle()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	h.load(cf)
	if st := h.ts().status(); len(st.Holds) != 0 {
		t.Fatalf("a released hold came back: %+v", st.Holds)
	}
	h.waitIdle()
}
