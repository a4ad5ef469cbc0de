package turnstile

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleetcaddy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// fleetHost is one GPU host of a fleet: its own Caddy process with the
// plugin, in reject mode, in front of its own fake Ollama and ComfyUI on
// one port (ComfyUI's routes to ComfyUI, the rest to Ollama).
type fleetHost struct {
	gpuHost
	addr string // host:port, as the front names it
	cmd  *exec.Cmd
}

func startFleetHost(t *testing.T, name string) *fleetHost {
	t.Helper()
	return startFleetHostWith(t, name, ollamatest.Options{})
}

// startFleetHostWith is startFleetHost with its fake Ollama's options.
func startFleetHostWith(t *testing.T, name string, o ollamatest.Options) *fleetHost {
	t.Helper()
	g := &fleetHost{gpuHost: gpuHost{name: name, gpu: gputest.New()}}
	o.Models = []string{"llama3.2", "qwen3:8b", "x", "warm"}
	g.ollama = ollamatest.NewServer(g.gpu, o)
	g.comfy = comfytest.NewServer(g.gpu, comfytest.Options{})
	port, adminPort := freePort(t), freePort(t)
	g.addr = fmt.Sprintf("127.0.0.1:%d", port)
	g.llm = "http://" + g.addr
	g.admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	cfg := fmt.Sprintf(childGlobals+`	gpu_turnstile {
		ollama %s
		comfy %s
		llm_busy_mode reject
		history_poll_interval 20ms
		unload_poll_interval 20ms
	}
}
:%d {
	bind 127.0.0.1
	header X-GPU-Host %s
	handle /healthz {
		gpu_turnstile_status
	}
	gpu_turnstile
	@comfy path /prompt /ws /history /history/* /queue /view /upload/* /interrupt
	reverse_proxy @comfy %s
	reverse_proxy %s {
		flush_interval -1
	}
}
`, adminPort, g.ollama.URL, g.comfy.URL, port, name, g.comfy.URL, g.ollama.URL)
	dir := t.TempDir()
	g.cmd = childCaddy(t, os.Args[0], cfg, dir, dir)
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.stop()
		g.ollama.Close()
		g.comfy.Close()
		if o := g.gpu.Overlaps(); len(o) > 0 {
			t.Errorf("host %s: GPU shared: %v", name, o)
		}
	})
	g.waitStatus(t, "started", func(st Status) bool { return st.State == "idle" })
	return g
}

// stop ends the host's Caddy as a service manager would (SIGTERM), once.
func (g *fleetHost) stop() {
	if g.cmd.ProcessState == nil {
		g.cmd.Process.Signal(syscall.SIGTERM)
		g.cmd.Wait()
	}
}

// waitStatus waits until the host's status satisfies cond.
func (g *fleetHost) waitStatus(t *testing.T, what string, cond func(Status) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st Status
		resp, err := http.Get(g.llm + "/healthz")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && cond(st) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s: not %s: %+v %v", g.name, what, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loaded reports whether the status shows model loaded on an LLM engine.
func loaded(model string) func(Status) bool {
	return func(st Status) bool {
		for _, e := range st.Engines {
			if e.Class == "llm" && (slices.Contains(e.Models, model) || slices.Contains(e.Models, model+":latest")) {
				return true
			}
		}
		return false
	}
}

// startFront loads a front Caddy, in this process, with gpu_turnstile_fleet
// over hosts (host:port each) and the block's extra lines; it returns its
// URL.
func startFront(t *testing.T, hosts []string, extra string) string {
	t.Helper()
	port, adminPort := freePort(t), freePort(t)
	cfg := fmt.Sprintf(childGlobals+`}
:%d {
	bind 127.0.0.1
	gpu_turnstile_fleet %s {
		fallback first
		%s
	}
}
`, adminPort, port, strings.Join(hosts, " "), extra)
	if err := loadCaddyfile(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	front := fmt.Sprintf("http://127.0.0.1:%d", port)
	frontAdmins.Store(front, fmt.Sprintf("http://127.0.0.1:%d", adminPort))
	if extra == "" {
		followed(t, front, hosts)
	}
	return front
}

// frontAdmins are the fronts' admin endpoints, by their URLs.
var frontAdmins sync.Map

// frontMetric is the value of a series in the front's /metrics, 0 if it
// has none.
func frontMetric(t *testing.T, front, series string) float64 {
	t.Helper()
	admin, _ := frontAdmins.Load(front)
	resp, err := http.Get(admin.(string) + "/metrics")
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

// followed has the front start following its hosts (its first pick does,
// for every host: a request that loads nothing) and waits until it knows
// each one's state, so that no chat sent next goes by the fallback and
// loads its model on the wrong host.
func followed(t *testing.T, front string, hosts []string) {
	t.Helper()
	send(t, http.MethodGet, front+"/api/tags", "")
	deadline := time.Now().Add(10 * time.Second)
	for _, h := range hosts {
		url := "http://" + h + "/healthz"
		for !fleetcaddy.Knows(url) {
			if time.Now().After(deadline) {
				t.Fatalf("the front never learned the state of %s", h)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// fleetClient keeps no cookies: each test says which it sends.
var fleetClient = &http.Client{Timeout: 15 * time.Second}

// send sends a request through the front and returns the host that
// answered it, and the answer.
func send(t *testing.T, method, url, body string, header ...string) (string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := fleetClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s through the front: %v", method, url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("X-GPU-Host"), resp
}

// chatVia sends a chat for model through the front: the host that
// served it (it must succeed).
func chatVia(t *testing.T, front, model string) string {
	t.Helper()
	host, resp := send(t, http.MethodPost, front+"/api/chat", chatBody(model, false))
	if resp.StatusCode != 200 {
		t.Fatalf("chat for %s through the front: %d (host %q)", model, resp.StatusCode, host)
	}
	return host
}

// untilVia sends chats for model through the front until one is served
// by host (the front has seen what it needed to), then checks that the
// next n are too.
func untilVia(t *testing.T, front, model, host string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for chatVia(t, front, model) != host {
		if time.Now().After(deadline) {
			t.Fatalf("chats for %s never went to host %s", model, host)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range n {
		if got := chatVia(t, front, model); got != host {
			t.Fatalf("chat for %s went to %s, want %s", model, got, host)
		}
	}
}
