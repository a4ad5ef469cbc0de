package turnstile

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// childEnv makes the test binary run as a Caddy with this plugin, so tests
// can start separate Caddy instances without building one with xcaddy.
const childEnv = "GPU_TURNSTILE_TEST_RUN_CADDY"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		caddycmd.Main()
		return
	}
	// Holds are kept in Caddy's storage: keep the tests' (and their child
	// processes') out of the user's data directory.
	dir, err := os.MkdirTemp("", "gpu-turnstile-test-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	caddy.DefaultStorage = &certmagic.FileStorage{Path: filepath.Join(dir, "caddy")}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gpuHost is one GPU machine: its own Caddy process with the plugin, in
// front of its own fake Ollama and ComfyUI.
type gpuHost struct {
	name   string
	gpu    *gputest.GPU
	ollama *ollamatest.Server
	comfy  *comfytest.Server
	llm    string
	admin  string
}

// childGlobals opens a child Caddy's global options: its admin address
// (the %d), nothing persisted, no HTTPS, no logs.
const childGlobals = `{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	log {
		output discard
	}
`

// childCaddy is the command that runs bin (this test binary) as Caddy
// over the Caddyfile cfg, written into dir, with its data and config in
// data and env added; the caller starts it.
func childCaddy(t *testing.T, bin, cfg, dir, data string, env ...string) *exec.Cmd {
	t.Helper()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(append(os.Environ(), childEnv+"=1", "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+data, "HOME="+data), env...)
	return cmd
}

func startHost(t *testing.T, name, settings string) *gpuHost {
	t.Helper()
	g := &gpuHost{name: name, gpu: gputest.New()}
	g.ollama = ollamatest.NewServer(g.gpu, ollamatest.Options{})
	g.comfy = comfytest.NewServer(g.gpu, comfytest.Options{})
	llmPort, adminPort := freePort(t), freePort(t)
	g.llm = fmt.Sprintf("http://127.0.0.1:%d", llmPort)
	g.admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	cfg := fmt.Sprintf(childGlobals+`	gpu_turnstile {
		ollama %s
		comfy %s
		history_poll_interval 20ms
		unload_poll_interval 20ms
		%s
	}
}
:%d {
	bind 127.0.0.1
	header X-GPU-Host %s
	handle /healthz {
		gpu_turnstile_status
	}
	gpu_turnstile
	reverse_proxy %s {
		flush_interval -1
	}
}
`, adminPort, g.ollama.URL, g.comfy.URL, settings, llmPort, name, g.ollama.URL)
	dir := t.TempDir()
	cmd := childCaddy(t, os.Args[0], cfg, dir, dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		g.ollama.Close()
		g.comfy.Close()
		if o := g.gpu.Overlaps(); len(o) > 0 {
			t.Errorf("host %s: GPU shared: %v", name, o)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.llm + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s did not start: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gpuHost) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func (g *gpuHost) hold(t *testing.T) string {
	t.Helper()
	resp, err := http.Post(g.admin+"/gpu_turnstile/holds", "application/json", strings.NewReader(`{"owner":"test","ttl":"1m"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("hold on %s: %v %v", g.name, resp, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(string(b))[1]
}

func (g *gpuHost) release(t *testing.T, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, g.admin+"/gpu_turnstile/holds/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("release on %s: %v %v", g.name, resp, err)
	}
	resp.Body.Close()
}

// TestFrontTierMovesLLMTrafficOffABusyHost runs two GPU hosts (separate
// Caddy processes with the plugin, in reject mode) behind the front Caddy
// of examples/front-tier (gpu_turnstile_fleet). While one host is held,
// every request succeeds on the other, and once the front has seen the
// hold none is sent to the held host; once it is free, chats are served
// still.
func TestFrontTierMovesLLMTrafficOffABusyHost(t *testing.T) {
	a := startHost(t, "a", "llm_busy_mode reject")
	b := startHost(t, "b", "llm_busy_mode reject")
	// The front is examples/front-tier/Caddyfile, as shipped.
	frontPort := freePort(t)
	front := fmt.Sprintf("http://127.0.0.1:%d", frontPort)
	for k, v := range map[string]string{
		"FRONT_ADMIN": fmt.Sprintf("127.0.0.1:%d", freePort(t)), "FRONT_LLM_PORT": strconv.Itoa(frontPort),
		"FRONT_IMAGE_PORT": strconv.Itoa(freePort(t)), "HEALTH_INTERVAL": "50ms",
		"HOST_A": strings.TrimPrefix(a.llm, "http://"), "HOST_B": strings.TrimPrefix(b.llm, "http://"),
		"IMAGE_A": "127.0.0.1:1", "IMAGE_B": "127.0.0.1:1",
		"XDG_CONFIG_HOME": t.TempDir(), "XDG_DATA_HOME": t.TempDir(),
	} {
		t.Setenv(k, v)
	}
	cfg, err := os.ReadFile("examples/front-tier/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := loadCaddyfile(string(cfg)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })

	client := &http.Client{Timeout: 10 * time.Second}
	chat := func() string {
		t.Helper()
		resp, err := client.Post(front+"/api/chat", "application/json", strings.NewReader(chatBody("llama3.2", false)))
		if err != nil {
			t.Fatalf("request through the front lost: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request through the front: %d", resp.StatusCode)
		}
		return resp.Header.Get("X-GPU-Host")
	}
	for range 10 {
		chat()
	}
	held, other := a, b

	// A host is taken for a game: every request still succeeds (on the
	// other), and once the front has seen it, none reaches the held host.
	hold := held.hold(t)
	rejects := `gpu_turnstile_busy_total{reason="reject",turnstile="default"}`
	deadline := time.Now().Add(15 * time.Second)
	for quiet := 0; quiet < 20; {
		before := held.metric(t, rejects)
		if host := chat(); host != other.name {
			t.Fatalf("served by %s while it was held", host)
		}
		if held.metric(t, rejects) == before {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatal("the front kept sending LLM traffic to the held host")
		}
	}
	held.release(t, hold)
	for range 5 {
		chat()
	}
}

// TestNamedTurnstilesAreIndependent runs two GPUs in one Caddy: an image
// job on one does not block LLM requests on the other.
func TestNamedTurnstilesAreIndependent(t *testing.T) {
	gpu0, gpu1 := gputest.New(), gputest.New()
	o0, o1 := ollamatest.NewServer(gpu0, ollamatest.Options{}), ollamatest.NewServer(gpu1, ollamatest.Options{})
	c0, c1 := comfytest.NewServer(gpu0, comfytest.Options{JobDuration: time.Hour}), comfytest.NewServer(gpu1, comfytest.Options{JobDuration: time.Hour})
	defer func() {
		caddy.Stop()
		for _, s := range []interface{ Close() }{o0, o1, c0, c1} {
			s.Close()
		}
		if len(gpu0.Overlaps())+len(gpu1.Overlaps()) > 0 {
			t.Errorf("GPU shared: %v %v", gpu0.Overlaps(), gpu1.Overlaps())
		}
	}()
	ports := []int{freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)}
	cfg := fmt.Sprintf(childGlobals+`	gpu_turnstile gpu0 {
		ollama %s
		comfy %s
	}
	gpu_turnstile gpu1 {
		ollama %s
		comfy %s
	}
}
:%d {
	bind 127.0.0.1
	gpu_turnstile {
		turnstile gpu0
	}
	reverse_proxy %s
}
:%d {
	bind 127.0.0.1
	gpu_turnstile {
		turnstile gpu1
	}
	reverse_proxy %s
}
:%d {
	bind 127.0.0.1
	gpu_turnstile {
		turnstile gpu1
	}
	reverse_proxy %s
}
:%d {
	bind 127.0.0.1
	handle /gpu0 {
		gpu_turnstile_status gpu0
	}
	handle /gpu1 {
		gpu_turnstile_status gpu1
	}
}
`, ports[0], o0.URL, c0.URL, o1.URL, c1.URL, ports[1], o0.URL, ports[2], o1.URL, ports[3], c1.URL, ports[4])
	if err := loadCaddyfile(cfg); err != nil {
		t.Fatal(err)
	}
	llm0 := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	llm1 := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	image1 := fmt.Sprintf("http://127.0.0.1:%d", ports[3])
	h := &harness{t: t, client: http.DefaultClient}
	idle := func(st Status) bool { return st.State == "idle" }
	for _, name := range []string{"gpu0", "gpu1"} {
		waitTurnstile(t, name, "idle after start", idle, nil)
	}
	promptID(t, h.post(context.Background(), image1+"/prompt", promptBody(3_600_000)))
	if st := runtimeOf("gpu1").status(); st.State != "image" {
		t.Fatalf("gpu1 %s, want image", st.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r := h.post(ctx, llm0+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM on gpu0 during a job on gpu1: %d %v", r.status, r.err)
	}
	// gpu1's LLM requests wait for its job.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if r := h.post(short, llm1+"/api/chat", chatBody("llama3.2", false)); r.err == nil {
		t.Fatalf("LLM on gpu1 answered %d during its job", r.status)
	}
	// The admin status lists both.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/gpu_turnstile/status", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`"gpu0":\{"state":"(idle|llm)"`).Match(all) || !strings.Contains(string(all), `"gpu1":{"state":"image"`) {
		t.Fatalf("admin status: %s", all)
	}
	h.do("POST", c1.URL+"/interrupt", "{}")
	waitTurnstile(t, "gpu1", "idle after the interrupt", idle, nil)
}
