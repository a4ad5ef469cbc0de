package turnstile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/caddyserver/certmagic"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// harness runs a real Caddy in this process, configured from a Caddyfile,
// in front of the fake Ollama and ComfyUI, which share one simulated GPU.
type harness struct {
	t      *testing.T
	gpu    *gputest.GPU
	ollama *ollamatest.Server
	comfy  *comfytest.Server
	llm    string // base URL of Caddy's Ollama-facing listener
	image  string // base URL of Caddy's ComfyUI-facing listener
	admin  string // base URL of Caddy's admin endpoint
	ports  [3]int
	client *http.Client
	// overlapExpected is set by tests of work that bypasses the turnstile
	// (queued on ComfyUI directly), which the turnstile can only react to.
	overlapExpected bool
}

type harnessOptions struct {
	ollama   ollamatest.Options
	comfy    comfytest.Options
	settings string // extra lines inside the gpu_turnstile block
	site     string // extra directives in each site block
	noComfy  bool
	noOllama bool
	// comfyURL, if set, is a ComfyUI server to use instead of the fake
	// (which is then not started): the turnstile and the proxy both go
	// there.
	comfyURL string
	// ollamaURL, if set, is the Ollama Caddy and the turnstile use instead
	// of the fake (which then runs unused).
	ollamaURL string
	// beforeLoad runs after the fakes start and before Caddy loads.
	beforeLoad func(*harness)
	// edit, if set, changes the Caddyfile before Caddy loads it.
	edit func(caddyfile string) string
}

// defaultName is the turnstile a handler uses when it names none.
const defaultName = tcfg.DefaultName

func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	h := &harness{t: t, gpu: gputest.New(), client: newTestClient()}
	h.ollama = ollamatest.NewServer(h.gpu, opts.ollama)
	if opts.comfyURL == "" {
		h.comfy = comfytest.NewServer(h.gpu, opts.comfy)
	}
	for i := range h.ports {
		h.ports[i] = freePort(t)
	}
	h.llm = fmt.Sprintf("http://127.0.0.1:%d", h.ports[0])
	h.image = fmt.Sprintf("http://127.0.0.1:%d", h.ports[1])
	h.admin = fmt.Sprintf("http://127.0.0.1:%d", h.ports[2])
	if opts.beforeLoad != nil {
		opts.beforeLoad(h)
	}
	// Each test its own storage: a hold left in place when a test's
	// Caddy stops is saved there, and must not come back in the next test.
	caddy.DefaultStorage = &certmagic.FileStorage{Path: t.TempDir()}
	cf := h.caddyfile(opts)
	if opts.edit != nil {
		cf = opts.edit(cf)
	}
	h.load(cf)
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
		h.client.CloseIdleConnections()
		h.ollama.Close()
		if h.comfy != nil {
			h.comfy.Close()
		}
		h.checkCard()
	})
	return h
}

// checkCard fails the test if the simulated GPU was shared (unless the
// test expects it) or over-committed.
func (h *harness) checkCard() {
	if o := h.gpu.Overlaps(); len(o) > 0 && !h.overlapExpected {
		h.t.Errorf("the GPU was shared:\n%s\ntimeline:\n%s", strings.Join(o, "\n"), gputest.Dump(h.gpu.Events()))
	}
	if o := h.gpu.OverCommits(); len(o) > 0 {
		h.t.Errorf("the card was over-committed:\n%s\ntimeline:\n%s", strings.Join(o, "\n"), gputest.Dump(h.gpu.Events()))
	}
}

// withMemory gives the simulated card a size, read through the fake
// nvidia-smi that it puts first on PATH.
func (h *harness) withMemory(size int64) {
	h.gpu.SetMemory(size)
	h.t.Setenv("PATH", filepath.Dir(h.gpu.FakeSMI(h.t.TempDir()))+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// newTestClient is the tests' HTTP client. A connection the kernel has
// queued on an old config's listener is reset as that listener closes
// (Caddy's listeners share their port across a reload, SO_REUSEPORT):
// nothing was sent on it, so its dial is tried again.
func newTestClient() *http.Client {
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		for try := 1; ; try++ {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil || try == 3 || !errors.Is(err, syscall.ECONNRESET) {
				return c, err
			}
		}
	}
	return &http.Client{Transport: retryUnread{&http.Transport{MaxIdleConnsPerHost: 256, DialContext: dial}}}
}

// retryUnread sends a request again when its connection was closed
// before any answer came (io.EOF, a reset): right after a reload, the old
// config's server closes the connections it accepted and had not read
// from yet. A request whose body cannot be had again is not retried.
type retryUnread struct{ rt http.RoundTripper }

func (t retryUnread) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	for try := 1; try < 3 && err != nil && r.Context().Err() == nil &&
		(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)); try++ {
		if r.Body != nil && r.Body != http.NoBody {
			if r.GetBody == nil {
				break
			}
			body, gerr := r.GetBody()
			if gerr != nil {
				break
			}
			r = r.Clone(r.Context())
			r.Body = body
		}
		resp, err = t.rt.RoundTrip(r)
	}
	return resp, err
}

// CloseIdleConnections closes the transport's idle connections.
func (t retryUnread) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (h *harness) caddyfile(opts harnessOptions) string {
	comfyUpstream := opts.comfyURL
	if comfyUpstream == "" {
		comfyUpstream = h.comfy.URL
	}
	ollamaURL, comfyURL := h.ollama.URL, comfyUpstream
	if opts.ollamaURL != "" {
		ollamaURL = opts.ollamaURL
	}
	upstream := ollamaURL
	if opts.noOllama {
		ollamaURL = ""
	}
	if opts.noComfy {
		comfyURL = ""
	}
	// Fast polling by default; a test's settings may set these options
	// themselves (an option given twice is an error).
	var defaults []string
	for _, d := range []string{"history_poll_interval 20ms", "unload_poll_interval 20ms", "backoff 10ms 100ms"} {
		if !regexp.MustCompile(`(?m)^\s*` + strings.Fields(d)[0] + `\s`).MatchString(opts.settings) {
			defaults = append(defaults, d)
		}
	}
	logs := "log {\n\t\toutput discard\n\t}"
	if os.Getenv("TURNSTILE_TEST_LOGS") != "" {
		logs = "log {\n\t\tlevel DEBUG\n\t}"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	%s
	gpu_turnstile {
		ollama "%s"
		comfy "%s"
		%s
		%s
	}
}

:%d {
	bind 127.0.0.1
	%s
	handle /healthz {
		gpu_turnstile_status
	}
	handle /healthz/full {
		gpu_turnstile_status {
			detail full
		}
	}
	gpu_turnstile
	reverse_proxy %s {
		flush_interval -1
	}
}

:%d {
	bind 127.0.0.1
	%s
	handle /healthz {
		gpu_turnstile_status
	}
	handle /healthz/full {
		gpu_turnstile_status {
			detail full
		}
	}
	gpu_turnstile
	reverse_proxy %s
}
`, h.ports[2], logs, ollamaURL, comfyURL, strings.Join(defaults, "\n\t\t"), opts.settings, h.ports[0], opts.site, upstream, h.ports[1], opts.site, comfyUpstream)
}

// load adapts a Caddyfile and loads it, as `caddy reload` would.
func (h *harness) load(caddyfile string) {
	h.t.Helper()
	if err := loadCaddyfile(caddyfile); err != nil {
		h.t.Fatalf("loading config: %v\n%s", err, caddyfile)
	}
	// The old config's servers close their idle connections as they shut
	// down: no request may pick one up on its way out.
	h.client.CloseIdleConnections()
}

func loadCaddyfile(caddyfile string) error {
	adapter := caddyconfig.GetAdapter("caddyfile")
	cfg, _, err := adapter.Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return err
	}
	return caddy.Load(cfg, true)
}

// usedPorts are the ports freePort has handed out in this process. None is
// handed out twice: a previous test's Caddy may still be letting go of its
// listeners (graceful shutdown), and a request to a reused port could reach
// that old server instead of the new one.
var usedPorts sync.Map

func freePort(t *testing.T) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, used := usedPorts.LoadOrStore(port, true); !used {
			return port
		}
	}
}

// ts returns the default turnstile's runtime.
func (h *harness) ts() *turnstile { return runtimeOf(defaultName) }

// status reads the full status JSON through Caddy (/healthz/full: the
// site's /healthz gives the public view).
func (h *harness) status() Status {
	h.t.Helper()
	resp, err := h.client.Get(h.llm + "/healthz/full")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// waitStatus polls the turnstile's status (in process, no HTTP) until cond
// holds. Waiting requests are visible only there.
func (h *harness) waitStatus(what string, cond func(Status) bool) Status {
	h.t.Helper()
	return waitTurnstile(h.t, defaultName, what, cond, func() string { return "\ntimeline:\n" + gputest.Dump(h.gpu.Events()) })
}

// waitTurnstile waits until the named turnstile's status meets cond, and
// fails the test after 15 s; more, if not nil, adds to the failure message.
func waitTurnstile(t *testing.T, name, what string, cond func(Status) bool, more func() string) Status {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		// The turnstile is looked up each time: a restart of Caddy
		// replaces it (the old one's Close is a change too).
		ts := runtimeOf(name)
		changed := ts.orch().Changed()
		st := ts.status()
		if cond(st) {
			return st
		}
		select {
		case <-changed:
		case <-deadline.C:
			extra := ""
			if more != nil {
				extra = more()
			}
			t.Fatalf("timed out waiting for %s of turnstile %s; status %+v%s", what, name, ts.status(), extra)
		}
	}
}

func (h *harness) waitIdle() {
	h.t.Helper()
	h.waitStatus("idle", func(st Status) bool {
		return st.State == "idle" && st.LLMInflight == 0 && st.LLMWaiting == 0 && st.ImageWaiting == 0 && !st.Warming
	})
}

// waitTimeline waits until cond holds over the GPU's timeline.
// interruptRunning interrupts the job running on the fake ComfyUI at url
// once it has started: ComfyUI drops an interrupt that comes before.
func (h *harness) interruptRunning(url string) {
	h.t.Helper()
	h.waitTimeline("a job's start", func(ev []gputest.Event) bool {
		last := -1
		for i, e := range ev {
			if e.Service == "comfy" && strings.HasPrefix(e.What, "job ") && strings.HasSuffix(e.What, " start") {
				last = i
			}
		}
		return last >= 0 && gputest.Index(ev, last, "comfy", " end ") < 0
	})
	h.do("POST", url+"/interrupt", "{}")
}

func (h *harness) waitTimeline(what string, cond func([]gputest.Event) bool) {
	h.t.Helper()
	if !h.gpu.WaitFor(15*time.Second, cond) {
		h.t.Fatalf("timed out waiting for %s; timeline:\n%s", what, gputest.Dump(h.gpu.Events()))
	}
}

type result struct {
	status int
	header http.Header
	body   string
	err    error
}

func (h *harness) post(ctx context.Context, url, body string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	return h.send(req)
}

// send makes a request and reads the whole answer.
func (h *harness) send(req *http.Request) result {
	resp, err := h.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

func (h *harness) postAsync(ctx context.Context, url, body string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- h.post(ctx, url, body) }()
	return ch
}

func chatBody(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"stream":%v}`, model, stream)
}

// promptSeed varies each prompt's seed, as users do, so that ComfyUI's
// cache never answers a prompt at once.
var promptSeed atomic.Int64

func promptBody(durationMS int) string {
	return fmt.Sprintf(`{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"browser","extra_data":{"fake_duration_ms":%d}}`,
		promptSeed.Add(1), durationMS)
}

// streamStart opens a streaming chat and returns once the first line has
// arrived (the request holds the GPU); finish reads the rest.
func (h *harness) streamStart(ctx context.Context, path, body string) (finish func() result) {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.llm+path, strings.NewReader(body))
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil {
		h.t.Fatalf("first line: %v", err)
	}
	return func() result {
		defer resp.Body.Close()
		rest, err := io.ReadAll(br)
		return result{status: resp.StatusCode, header: resp.Header, body: first + string(rest), err: err}
	}
}

func promptID(t *testing.T, r result) string {
	t.Helper()
	if r.err != nil || r.status != 200 {
		t.Fatalf("prompt: %d %v %s", r.status, r.err, r.body)
	}
	id, ok := comfy.PromptID([]byte(r.body))
	if !ok {
		t.Fatalf("no prompt_id in %s", r.body)
	}
	return id
}

// counter counts events of one kind.
func count(events []gputest.Event, service, substr string) int {
	n := 0
	for _, e := range events {
		if e.Service == service && strings.Contains(e.What, substr) {
			n++
		}
	}
	return n
}

func comfyOpts(job time.Duration) comfytest.Options { return comfytest.Options{JobDuration: job} }

// takeHold takes an external hold through the admin API.
func (h *harness) takeHold(t *testing.T, owner, ttl string) string {
	t.Helper()
	r := h.post(context.Background(), h.admin+"/gpu_turnstile/holds", fmt.Sprintf(`{"turnstile":"default","owner":%q,"ttl":%q}`, owner, ttl))
	if r.status != http.StatusCreated {
		t.Fatalf("hold: %d %s %v", r.status, r.body, r.err)
	}
	var out struct{ ID string }
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || out.ID == "" {
		t.Fatalf("hold answer %s", r.body)
	}
	return out.ID
}

func (h *harness) releaseHold(t *testing.T, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, h.admin+"/gpu_turnstile/holds/"+id, nil)
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("release hold: %v %v", resp, err)
	}
	resp.Body.Close()
}

// runtimeOf finds a turnstile's runtime in the process-wide pool.
func runtimeOf(name string) *turnstile {
	var ts *turnstile
	turnstiles.Range(func(k, v any) bool {
		if k.(string) == name {
			ts = v.(*turnstile)
		}
		return ts == nil
	})
	return ts
}

// orch is ts's GPU, for what the root does not use of it.
func (ts *turnstile) orch() *gpu.GPU { return ts.gpu }
