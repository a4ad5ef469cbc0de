package turnstile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// launcherAuth is the Basic credentials of withHoldsSite's launcher, as
// a browser caches and sends them.
const launcherAuth = "Basic bGF1bmNoZXI6bGF1bmNoLXNlY3JldA=="

// request is one request to the harness, with the headers a browser would
// add; a "Content-Type" of "-" sends the body without one.
func (h *harness) request(method, url, body string, header ...string) result {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "-" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	return h.send(req)
}

// refusedWith checks that r is a JSON error with this status that says
// what to do.
func refusedWith(t *testing.T, what string, r result, status int, want string) {
	t.Helper()
	var body struct{ Error string }
	if r.status != status || json.Unmarshal([]byte(r.body), &body) != nil || !strings.Contains(body.Error, want) ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Errorf("%s: %d %s, want %d with %q", what, r.status, r.body, status, want)
	}
}

// noHold fails t if anything holds or waits to hold the GPU.
func (h *harness) noHold(t *testing.T, after string) {
	t.Helper()
	if st := h.ts().status(); len(st.Holds) != 0 || st.HoldWaiting != 0 {
		t.Fatalf("after %s: the GPU is held: %+v", after, st.Holds)
	}
}

// A cross-site HTML form (enctype text/plain) sent with the browser's
// cached Basic credentials cannot take the GPU through
// gpu_turnstile_holds; the site's own page, a trusted origin and a script
// can.
func TestHoldsRefuseCrossSiteRequests(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cf := strings.Replace(withHoldsSite(h.caddyfile(harnessOptions{})), "\t\tgpu_turnstile_holds\n",
		"\t\tgpu_turnstile_holds {\n\t\t\ttrusted_origins https://launcher.example\n\t\t}\n", 1)
	h.load(cf)
	h.waitIdle()
	holds := h.llm + "/gpu/holds"
	form := `{"owner":"evil","ttl":"24h","x":"="}`
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"Origin of another site", []string{"Content-Type", "text/plain", "Origin", "https://evil.example"}},
		{"Sec-Fetch-Site cross-site", []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}},
		{"same-site page on another port", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:1"}},
		{"a JSON fetch from another site", []string{"Content-Type", "application/json", "Origin", "https://evil.example"}},
	} {
		r := h.request("POST", holds, form, append(tc.header, "Authorization", launcherAuth)...)
		refusedWith(t, tc.name, r, 403, "cross-origin request refused")
		h.noHold(t, tc.name)
	}
	for _, tc := range []struct{ name, contentType string }{{"text/plain", "text/plain"}, {"a form", "application/x-www-form-urlencoded"}, {"no type", "-"}} {
		r := h.request("POST", holds, form, "Content-Type", tc.contentType, "Authorization", launcherAuth)
		refusedWith(t, "a script's body with "+tc.name, r, 415, "send Content-Type: application/json")
		h.noHold(t, tc.name)
	}
	// Listing is a safe method: any page may read it (behind the auth).
	if r := h.request("GET", holds, "", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Authorization", launcherAuth); r.status != 200 {
		t.Errorf("GET from another site: %d %s", r.status, r.body)
	}

	// The site's own page, a trusted origin and a script are served,
	// once the start-up probe has given the GPU back.
	h.waitIdle()
	take := func(who string, header ...string) string {
		t.Helper()
		r := h.request("POST", holds, `{"owner":"`+who+`","wait":false}`, append(header, "Content-Type", "application/json; charset=utf-8", "Authorization", launcherAuth)...)
		var out struct{ ID string }
		if r.status != 201 || json.Unmarshal([]byte(r.body), &out) != nil {
			t.Fatalf("%s: %d %s, want 201", who, r.status, r.body)
		}
		return out.ID
	}
	id := take("same-origin page", "Origin", h.llm, "Sec-Fetch-Site", "same-origin")
	// Renewing and releasing are refused cross-site too.
	refusedWith(t, "renew from another site", h.request("POST", holds+"/"+id+"/renew", "", "Origin", "https://evil.example", "Authorization", launcherAuth), 403, "cross-origin")
	refusedWith(t, "release from another site", h.request("DELETE", holds+"/"+id, "", "Sec-Fetch-Site", "cross-site", "Authorization", launcherAuth), 403, "cross-origin")
	refusedWith(t, "renew with a form's body", h.request("POST", holds+"/"+id+"/renew", `{"ttl":"24h"}`, "Content-Type", "text/plain", "Authorization", launcherAuth), 415, "application/json")
	if st := h.ts().status(); len(st.Holds) != 1 || st.Holds[0].ExpiresAt.Sub(st.Holds[0].Since) > 6*time.Minute {
		t.Fatalf("the hold after refused renewals: %+v", st.Holds)
	}
	h.releaseHold(t, id)
	h.waitIdle()
	h.releaseHold(t, take("trusted launcher", "Origin", "https://launcher.example", "Sec-Fetch-Site", "cross-site"))
	h.waitIdle()
	h.releaseHold(t, take("script"))
	h.waitIdle()
}

// On the admin endpoint, Caddy's origin check is in charge; the turnstile
// adds the 415 rule to its hold and job routes.
func TestAdminRefusesBodiesThatAreNotJSON(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	admin := h.admin + "/gpu_turnstile"
	for _, tc := range []struct{ method, path, body, contentType string }{
		{"POST", "/holds", `{"owner":"x","ttl":"24h"}`, "text/plain"},
		{"POST", "/holds", `{"owner":"x","ttl":"24h"}`, "-"},
		{"POST", "/holds", `owner=x`, "application/x-www-form-urlencoded"},
		{"POST", "/holds/abc/renew", `{"ttl":"24h"}`, "text/plain"},
		{"DELETE", "/holds/abc", `{}`, "text/plain"},
		{"DELETE", "/job", `{}`, "text/plain"},
		{"DELETE", "/job", `{}`, "-"},
	} {
		r := h.request(tc.method, admin+tc.path, tc.body, "Content-Type", tc.contentType)
		refusedWith(t, tc.method+" "+tc.path+" "+tc.contentType, r, 415, "send Content-Type: application/json")
		h.noHold(t, tc.path)
	}
	// A script's JSON is served as before, once the start-up probe has
	// given the GPU back (a hold that does not wait would find it busy).
	h.waitIdle()
	r := h.request("POST", admin+"/holds", `{"owner":"script","wait":false}`, "Content-Type", "application/json")
	var out struct{ ID string }
	if r.status != 201 || json.Unmarshal([]byte(r.body), &out) != nil {
		t.Fatalf("a JSON hold: %d %s", r.status, r.body)
	}
	h.releaseHold(t, out.ID)
	h.waitIdle()
}

// The status handler's controls refuse a cancel from another site; the
// page's own DELETE (same-origin) stops the job.
func TestStatusControlsRefuseCrossSite(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour), edit: func(cf string) string {
		return strings.Replace(cf, "gpu_turnstile_status\n", "gpu_turnstile_status {\n\t\t\tcontrols\n\t\t}\n", 1)
	}})
	id := h.runningJob(t)
	cancel := h.llm + "/healthz?view=job"
	refusedWith(t, "Origin of another site", h.request("DELETE", cancel, "", "Origin", "https://evil.example"), 403, "cross-origin request refused")
	refusedWith(t, "Sec-Fetch-Site cross-site", h.request("DELETE", cancel, "", "Sec-Fetch-Site", "cross-site"), 403, "trusted_origins")
	refusedWith(t, "a form's body", h.request("DELETE", cancel, "x", "Content-Type", "text/plain"), 415, "application/json")
	if st := h.ts().status(); st.Job == nil || st.Job.PromptID != id {
		t.Fatalf("the job after refused cancels: %+v", st.Job)
	}
	r := h.request("DELETE", cancel, "", "Origin", h.llm, "Sec-Fetch-Site", "same-origin")
	h.checkCancelled(t, r, `{"prompt_id":"`+id+`","engine":"comfyui","outcome":"interrupted"}`, "comfy", "job "+id+" end execution_interrupted")
	h.waitIdle()
}

func TestTrustedOriginsCaddyfile(t *testing.T) {
	site := func(block string) string { return globalBlock + ":11434 {\n\t" + block + "\n}" }
	cfg, err := adapt(t, site("gpu_turnstile_holds {\n\t\ttrusted_origins https://a.example http://b.lan:8080\n\t\ttrusted_origins https://c.example\n\t}\n"+
		"\tgpu_turnstile_status {\n\t\tcontrols\n\t\ttrusted_origins https://admin.example\n\t}"))
	if err != nil {
		t.Fatal(err)
	}
	s := jsonString(t, cfg)
	for _, want := range []string{`{"handler":"gpu_turnstile_holds","trusted_origins":["https://a.example","http://b.lan:8080","https://c.example"]}`,
		`{"controls":true,"handler":"gpu_turnstile_status","trusted_origins":["https://admin.example"]}`} {
		if !strings.Contains(s, want) {
			t.Errorf("adapted %s, want %s", s, want)
		}
	}
	// globalBlock's lines come first: the site's directive is on line 8.
	for input, want := range map[string]string{
		"gpu_turnstile_holds {\n\t\ttrusted_origins\n\t}":                                                  "gpu_turnstile_holds: trusted_origins: want one or more origins|at Caddyfile:9",
		"gpu_turnstile_holds {\n\t\ttrusted_origins https://a.example/\n\t}":                               `gpu_turnstile_holds: trusted_origins: invalid origin "https://a.example/"|at Caddyfile:9`,
		"gpu_turnstile_holds {\n\t\ttrusted_origins https://a.example\n\t\ttrusted_origins a.example\n\t}": `gpu_turnstile_holds: trusted_origins: invalid origin "a.example"|at Caddyfile:10`,
		"gpu_turnstile_status {\n\t\tcontrols\n\t\ttrusted_origins https://u:p@a.example\n\t}":             `gpu_turnstile_status: trusted_origins: invalid origin|at Caddyfile:10`,
	} {
		msg, line, _ := strings.Cut(want, "|")
		if _, err := adapt(t, site(input)); err == nil || !strings.Contains(err.Error(), msg) || !strings.HasSuffix(err.Error(), line) {
			t.Errorf("%q: %v, want %q %s", input, err, msg, line)
		}
	}
}

// JSON gets the Caddyfile's check of trusted_origins, naming the handler
// and the field.
func TestTrustedOriginsJSON(t *testing.T) {
	port := freePort(t)
	for _, handler := range []string{"gpu_turnstile_holds", "gpu_turnstile_status"} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1"}}},
			"http":{"servers":{"s":{"listen":["127.0.0.1:%d"],"routes":[{"handle":[{"handler":%q,"trusted_origins":["https://ok.example","ftp//bad"]}]}]}}}}}`, port, handler)
		err := caddy.Load([]byte(cfg), true)
		if want := handler + `: trusted_origins: invalid origin "ftp//bad"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", handler, err, want)
		}
	}
}
