package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// TestFleetAdaptShowsTheExpansion runs `caddy adapt` on a front tier:
// gpu_turnstile_fleet is gpu_turnstile_classify, then reverse_proxy to
// the hosts with lb_policy gpu_turnstile and the retries a front tier
// needs.
func TestFleetAdaptShowsTheExpansion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	cfg := `:11434 {
	gpu_turnstile_fleet gpu-a:11434 gpu-b:11434 gpu-c:11434 {
		status_path /status
		fallback    least_conn
		stale       10s
		keep_for_chats 1m
		health_uri  /healthz
		header_up   X-Fleet-Key secret
		header_up   X-Real-IP {remote_host}
	}
}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "adapt", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), childEnv+"=1", "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	var adapted any
	if err := json.Unmarshal(out, &adapted); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	handlers := handlersWith(adapted, "gpu_turnstile_classify")
	if len(handlers) != 2 {
		t.Fatalf("want classify + reverse_proxy, got %s", out)
	}
	classify, proxy := jsonString(t, handlers[0]), jsonString(t, handlers[1])
	if !strings.Contains(classify, `"handler":"gpu_turnstile_classify"`) {
		t.Errorf("first handler: %s", classify)
	}
	for _, want := range []string{
		`"handler":"reverse_proxy"`,
		`"policy":"gpu_turnstile"`, `"status_path":"/status"`, `"stale":10000000000`, `"keep_for_chats":60000000000`, `"status_headers":{"X-Fleet-Key":["secret"]}`, `"fallback":{"policy":"least_conn"}`,
		`"retries":2`, `"retry_match":[{"expression":"{http.reverse_proxy.is_transport_error} == true \u0026\u0026 {http.vars.gpu_turnstile.class} == 'llm'"},{"expression":"{http.reverse_proxy.status_code} in [429, 503]"}]`,
		`"request_buffers":4194304`, `"flush_interval":-1`,
		`{"dial":"gpu-a:11434"}`, `{"dial":"gpu-b:11434"}`, `{"dial":"gpu-c:11434"}`,
		`"uri":"/healthz"`,
	} {
		if !strings.Contains(proxy, want) {
			t.Errorf("reverse_proxy lacks %s: %s", want, proxy)
		}
	}
}

// handlersWith finds, in an adapted config, the list of handlers that
// holds one of the handler name.
func handlersWith(v any, name string) []any {
	switch v := v.(type) {
	case map[string]any:
		if hs, ok := v["handle"].([]any); ok {
			for _, h := range hs {
				if m, ok := h.(map[string]any); ok && m["handler"] == name {
					return hs
				}
			}
		}
		for _, e := range v {
			if hs := handlersWith(e, name); hs != nil {
				return hs
			}
		}
	case []any:
		for _, e := range v {
			if hs := handlersWith(e, name); hs != nil {
				return hs
			}
		}
	}
	return nil
}

// TestFleetRoutesChatsByWhatEachHostIsDoing runs three GPU hosts behind a
// front with gpu_turnstile_fleet: a chat for a model only one host has
// loaded goes there; during a host's image job, chats for its model go to
// the others at once (none is refused by it and retried).
func TestFleetRoutesChatsByWhatEachHostIsDoing(t *testing.T) {
	a, b, c := startFleetHost(t, "a"), startFleetHost(t, "b"), startFleetHost(t, "c")
	for _, load := range []struct {
		h     *fleetHost
		model string
	}{{a, "llama3.2"}, {b, "qwen3:8b"}} {
		if _, resp := send(t, http.MethodPost, load.h.llm+"/api/chat", chatBody(load.model, false)); resp.StatusCode != 200 {
			t.Fatalf("loading %s on %s: %d", load.model, load.h.name, resp.StatusCode)
		}
		load.h.waitStatus(t, "with "+load.model+" loaded", loaded(load.model))
	}
	front := startFront(t, []string{a.addr, b.addr, c.addr}, "")
	warmOnB := fmt.Sprintf(`gpu_turnstile_fleet_picks_total{class="llm",upstream=%q,why="ready"}`, b.addr)
	before := frontMetric(t, front, warmOnB)
	untilVia(t, front, "qwen3:8b", "b", 10)
	if n := frontMetric(t, front, warmOnB) - before; n < 10 {
		t.Errorf("%s: %v picks counted, want at least the 10 chats b served warm", warmOnB, n)
	}
	untilVia(t, front, "llama3.2", "a", 5)

	if _, resp := send(t, http.MethodPost, a.llm+"/prompt", promptBody(3_600_000)); resp.StatusCode != 200 {
		t.Fatalf("image job on a: %d", resp.StatusCode)
	}
	a.waitStatus(t, "rendering", func(st Status) bool { return st.State == "image" })
	rejects := `gpu_turnstile_busy_total{reason="reject",turnstile="default"}`
	chatVia(t, front, "llama3.2") // the front has seen the job by now, or learns it here
	before = a.metric(t, rejects)
	for range 10 {
		if host := chatVia(t, front, "llama3.2"); host == "a" {
			t.Fatal("a chat went to the host that renders")
		}
	}
	if n := a.metric(t, rejects) - before; n != 0 {
		t.Errorf("%v chats were sent to the rendering host and refused there", n)
	}
	send(t, http.MethodPost, a.comfy.URL+"/interrupt", "{}")
}

// TestFleetChatFollowsAModelStillLoading: Ollama lists a model only once
// it has loaded, so while the first chat for a model loads it on one
// host, the hosts' statuses show it nowhere; a second chat for it goes to
// the host loading it, not to another idle host to load it cold there too.
func TestFleetChatFollowsAModelStillLoading(t *testing.T) {
	slow := ollamatest.Options{LoadDelay: 2 * time.Second}
	hosts := []*fleetHost{startFleetHostWith(t, "a", slow), startFleetHostWith(t, "b", slow), startFleetHostWith(t, "c", slow)}
	front := startFront(t, []string{hosts[0].addr, hosts[1].addr, hosts[2].addr}, "")
	first := make(chan string, 1)
	go func() {
		_, resp := send(t, http.MethodPost, front+"/api/chat", chatBody("qwen3:8b", false))
		first <- resp.Header.Get("X-GPU-Host")
	}()
	loading := func() bool {
		for _, h := range hosts {
			for _, e := range h.gpu.Events() {
				if strings.HasPrefix(e.What, "load qwen3") {
					return true
				}
			}
		}
		return false
	}
	deadline := time.After(10 * time.Second)
	for {
		a, b, c := hosts[0].gpu.Changed(), hosts[1].gpu.Changed(), hosts[2].gpu.Changed()
		if loading() {
			break
		}
		select {
		case <-a:
		case <-b:
		case <-c:
		case <-deadline:
			t.Fatal("the first chat's model never began to load")
		}
	}
	second := chatVia(t, front, "qwen3:8b")
	if got := <-first; got != second {
		t.Errorf("the second chat went to %s, the first (loading the model) to %s", second, got)
	}
	loads := 0
	for _, h := range hosts {
		for _, e := range h.gpu.Events() {
			if strings.HasPrefix(e.What, "load qwen3") {
				loads++
			}
		}
	}
	if loads != 1 {
		t.Errorf("the model was loaded %d times in the fleet, want 1", loads)
	}
}

// TestFleetImageJobGoesToTheIdleHostAndItsClientFollows: with one host
// rendering and one held, an image job goes to the idle one; the same
// client's later requests (by client_id, or by the cookie set on the
// answer) follow it there, even once another host is idle, while another
// client's job goes to the idle host.
func TestFleetImageJobGoesToTheIdleHostAndItsClientFollows(t *testing.T) {
	a, b, c := startFleetHost(t, "a"), startFleetHost(t, "b"), startFleetHost(t, "c")
	if _, resp := send(t, http.MethodPost, a.llm+"/prompt", promptBody(3_600_000)); resp.StatusCode != 200 {
		t.Fatalf("image job on a: %d", resp.StatusCode)
	}
	a.waitStatus(t, "rendering", func(st Status) bool { return st.State == "image" })
	hold := b.hold(t)
	b.waitStatus(t, "held", func(st Status) bool { return st.State == "hold" })
	front := startFront(t, []string{a.addr, b.addr, c.addr}, "")
	untilVia(t, front, "x", "c", 3) // the front knows the three

	prompt := func(client string) string {
		return fmt.Sprintf(`{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":%q,"extra_data":{"fake_duration_ms":3600000}}`,
			promptSeed.Add(1), client)
	}
	host, resp := send(t, http.MethodPost, front+"/prompt", prompt("cli1"))
	if resp.StatusCode != 200 || host != "c" {
		t.Fatalf("image job: %d on %q, want the idle host c", resp.StatusCode, host)
	}
	var pin *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "gpu_turnstile_host" {
			pin = ck
		}
	}
	if pin == nil {
		t.Fatalf("no gpu_turnstile_host cookie on the image job's answer: %v", resp.Header)
	}

	b.release(t, hold)
	b.waitStatus(t, "idle", func(st Status) bool { return st.State == "idle" })
	untilVia(t, front, "x", "b", 1) // the front has seen b idle
	for _, r := range []struct{ what, method, path, body, cookie string }{
		{"its websocket's client id", http.MethodGet, "/queue?clientId=cli1", "", ""},
		{"its cookie", http.MethodGet, "/history", "", pin.Name + "=" + pin.Value},
	} {
		var hdr []string
		if r.cookie != "" {
			hdr = []string{"Cookie", r.cookie}
		}
		if host, resp := send(t, r.method, front+r.path, r.body, hdr...); host != "c" || resp.StatusCode != 200 {
			t.Errorf("the client's request by %s: %d on %q, want c", r.what, resp.StatusCode, host)
		}
	}
	// Its next job waits on c, behind its first, though b is idle.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next := (&harness{t: t, client: http.DefaultClient}).postAsync(ctx, front+"/prompt", prompt("cli1"))
	c.waitStatus(t, "with the client's next job waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	cancel()
	<-next
	if host, resp := send(t, http.MethodPost, front+"/prompt", prompt("cli2")); host != "b" || resp.StatusCode != 200 {
		t.Errorf("another client's job: %d on %q, want the idle host b", resp.StatusCode, host)
	}
	for _, h := range []*fleetHost{a, b, c} {
		send(t, http.MethodPost, h.comfy.URL+"/interrupt", "{}")
	}
}

// TestFleetHostStoppingLosesNoRequest stops the host that serves a
// stream of chats: every chat succeeds (those it had not accepted are
// retried elsewhere), and the others serve the rest.
func TestFleetHostStoppingLosesNoRequest(t *testing.T) {
	a, b, c := startFleetHost(t, "a"), startFleetHost(t, "b"), startFleetHost(t, "c")
	send(t, http.MethodPost, b.llm+"/api/chat", chatBody("qwen3:8b", false))
	b.waitStatus(t, "with qwen loaded", loaded("qwen3:8b"))
	front := startFront(t, []string{a.addr, b.addr, c.addr}, "")
	untilVia(t, front, "qwen3:8b", "b", 2)

	errs := make(chan error, 4)
	stop := make(chan struct{})
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				resp, err := fleetClient.Post(front+"/api/chat", "application/json", strings.NewReader(chatBody("qwen3:8b", false)))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d from %q", resp.StatusCode, resp.Header.Get("X-GPU-Host"))
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// b stops with chats in flight on it.
	inFlight := func(ev []gputest.Event) bool {
		n := 0
		for _, e := range ev {
			switch {
			case strings.HasPrefix(e.What, "request /api/chat"):
				n++
			case strings.HasPrefix(e.What, "done /api/chat"):
				n--
			}
		}
		return n > 0
	}
	if !b.gpu.WaitFor(10*time.Second, inFlight) {
		t.Fatal("no chat reached b")
	}
	b.stop()
	untilVia(t, front, "qwen3:8b", "a", 0)
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a chat was lost as its host stopped: %v", err)
		}
	}
	for range 5 {
		if host := chatVia(t, front, "qwen3:8b"); host == "b" {
			t.Fatal("served by the stopped host")
		}
	}
}

// TestFleetStalledHostIsUnknownAfterStale: a host whose event stream
// stalls (one status, then not even a keep-alive) is preferred while its
// state is fresh, and unknown once stale has passed: its chats go to a
// host whose stream is alive. Both hosts are fakes of a host's status
// stream (a real one's keep-alives come every 10 s, which a stale this
// short would not wait for).
func TestFleetStalledHostIsUnknownAfterStale(t *testing.T) {
	const stale = 2 * time.Second
	sent := make(chan time.Time, 1)
	stalled := fakeStatusHost(t, "stalled", `["warm"]`, 0, sent)
	live := fakeStatusHost(t, "live", `[]`, 50*time.Millisecond, nil)
	front := startFront(t, []string{stalled, live}, "stale "+stale.String())
	// No chat goes by the fallback: one sent to live would count as
	// warm there too.
	followed(t, front, []string{stalled, live})
	untilVia(t, front, "warm", "stalled", 3)
	at := <-sent
	deadline := time.Now().Add(10 * time.Second)
	for chatVia(t, front, "warm") != "live" {
		if time.Now().After(deadline) {
			t.Fatal("the stalled host was still chosen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if since := time.Since(at); since < stale {
		t.Errorf("the stalled host was dropped %v after its status, before stale (%v)", since, stale)
	}
	untilVia(t, front, "warm", "live", 3)
}

// fakeStatusHost serves a host's status event stream (idle, models
// loaded), then a keep-alive every keepAlive (0: none, the stream
// stalls), and answers every other request 200 naming itself in
// X-GPU-Host; sent, if not nil, is given the time of the first status.
// It returns its host:port.
func fakeStatusHost(t *testing.T, name, models string, keepAlive time.Duration, sent chan<- time.Time) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-GPU-Host", name)
			w.Write([]byte(`{"done":true}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		at := time.Now() // before the status goes: the front cannot have seen it earlier
		fmt.Fprintf(w, "event: status\ndata: {\"state\":\"idle\",\"engines\":[{\"class\":\"llm\",\"state\":\"ready\",\"reachable\":true,\"models\":%s}]}\n\n", models)
		w.(http.Flusher).Flush()
		select {
		case sent <- at:
		default:
		}
		var tick <-chan time.Time
		if keepAlive > 0 {
			tk := time.NewTicker(keepAlive)
			defer tk.Stop()
			tick = tk.C
		}
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick:
				fmt.Fprint(w, ": keep-alive\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}
