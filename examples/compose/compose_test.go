package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// The repository, from this directory.
const repo = "../.."

// The engines, by service name, and where each listens inside the stack
// (the ollama/ollama image on 11434; yanwk/comfyui-boot runs ComfyUI
// with --listen --port 8188).
var engines = map[string]string{
	"ollama":  "ollama:11434",
	"comfyui": "comfyui:8188",
}

// project loads compose.yaml the way `docker compose` does, with the
// compose specification's own loader (schema validation, interpolation,
// consistency of references), and with no environment or .env file: as
// a user sees it after a fresh checkout.
func project(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("no service %q", name)
	}
	return s
}

// abs resolves a path of the compose file (relative to this directory,
// unless the loader already made it absolute).
func abs(t *testing.T, p string) string {
	t.Helper()
	if !filepath.IsAbs(p) {
		p = filepath.Join(".", p)
	}
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestServices(t *testing.T) {
	p := project(t)
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"caddy", "comfyui", "ollama", "open-webui"}
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for _, n := range names {
		if s := p.Services[n]; s.Image == "" {
			t.Errorf("%s: no image", n)
		} else if n != "caddy" && (strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":")) {
			t.Errorf("%s: image %q has no tag", n, s.Image)
		}
	}
}

// Nothing but Caddy is reachable from outside the compose network, so
// no client can reach an engine past the turnstile.
func TestOnlyCaddyPublishesPorts(t *testing.T) {
	p := project(t)
	for name, s := range p.Services {
		switch nm := s.NetworkMode; {
		case nm == "host", strings.HasPrefix(nm, "service:"), strings.HasPrefix(nm, "container:"):
			t.Errorf("%s: network_mode %q shares a network namespace beyond the compose network", name, nm)
		}
		if name == "caddy" {
			if len(s.Ports) == 0 {
				t.Errorf("caddy publishes no ports")
			}
			continue
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only caddy may", name, s.Ports)
		}
	}
}

// Both engines reserve the GPU, the same one; the others none.
func TestGPUReservations(t *testing.T) {
	p := project(t)
	var ids [][]string
	for _, name := range []string{"ollama", "comfyui"} {
		s := service(t, p, name)
		if s.Deploy == nil || s.Deploy.Resources.Reservations == nil || len(s.Deploy.Resources.Reservations.Devices) == 0 {
			t.Errorf("%s reserves no device (deploy.resources.reservations.devices)", name)
			continue
		}
		devs := s.Deploy.Resources.Reservations.Devices
		if len(devs) != 1 {
			t.Errorf("%s reserves %d device requests, want one", name, len(devs))
			continue
		}
		d := devs[0]
		if d.Driver != "nvidia" || !slices.Contains(d.Capabilities, "gpu") {
			t.Errorf("%s reserves driver %q capabilities %v, want nvidia with gpu", name, d.Driver, d.Capabilities)
		}
		if len(d.IDs) == 0 {
			t.Errorf("%s reserves no device_ids: with a count, two GPUs could give the engines different ones", name)
		}
		ids = append(ids, d.IDs)
	}
	if len(ids) == 2 && !slices.Equal(ids[0], ids[1]) {
		t.Errorf("ollama reserves GPUs %v, comfyui %v: the turnstile guards one GPU shared by both", ids[0], ids[1])
	}
	for _, name := range []string{"caddy", "open-webui"} {
		s := service(t, p, name)
		if len(s.Gpus) > 0 || (s.Deploy != nil && s.Deploy.Resources.Reservations != nil && len(s.Deploy.Resources.Reservations.Devices) > 0) {
			t.Errorf("%s reserves a GPU; it needs none", name)
		}
	}
}

// The Caddyfile the caddy service mounts adapts and validates, and
// every route to an engine goes through gpu_turnstile.
func TestCaddyfile(t *testing.T) {
	p := project(t)
	s := service(t, p, "caddy")
	src := mountedCaddyfile(t, s)
	cfg := adapt(t, src)

	// The turnstile's settings name the engines where they listen.
	ts := cfg.Apps.Turnstile.Turnstiles["default"]
	for key, got := range map[string]string{"ollama": ts.Ollama, "comfyui": ts.Comfy} {
		if u, err := url.Parse(got); err != nil || u.Host != engines[key] {
			t.Errorf("gpu_turnstile's %s is %q, want http://%s", key, got, engines[key])
		}
	}

	// Every reverse_proxy to an engine comes after gpu_turnstile; each
	// engine is reached by one at least.
	reached := map[string]bool{}
	for name, srv := range cfg.Apps.HTTP.Servers {
		for _, v := range walk(srv.Routes, false) {
			if !v.guarded {
				t.Errorf("server %s %v: reverse_proxy to %s without gpu_turnstile before it", name, srv.Listen, v.dial)
			}
			reached[v.dial] = true
		}
	}
	for svc, addr := range engines {
		if !reached[addr] {
			t.Errorf("no route reaches %s (%s)", svc, addr)
		}
	}

	// Each published port is one Caddy listens on.
	listens := cfg.listenPorts()
	for _, port := range s.Ports {
		if _, ok := listens[fmt.Sprint(port.Target)]; !ok {
			t.Errorf("caddy publishes container port %d, where the Caddyfile does not listen (%v)", port.Target, listens)
		}
	}
}

// Open WebUI sends chat and image generation to Caddy, on listeners
// that lead to the right engine through the turnstile.
func TestOpenWebUI(t *testing.T) {
	p := project(t)
	s := service(t, p, "open-webui")
	cfg := adapt(t, mountedCaddyfile(t, service(t, p, "caddy")))
	env := func(k string) string {
		if v := s.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	if env("ENABLE_IMAGE_GENERATION") != "true" || env("IMAGE_GENERATION_ENGINE") != "comfyui" {
		t.Errorf("image generation: ENABLE_IMAGE_GENERATION=%q IMAGE_GENERATION_ENGINE=%q, want true and comfyui",
			env("ENABLE_IMAGE_GENERATION"), env("IMAGE_GENERATION_ENGINE"))
	}
	for key, engine := range map[string]string{"OLLAMA_BASE_URL": "ollama", "COMFYUI_BASE_URL": "comfyui"} {
		u, err := url.Parse(env(key))
		if err != nil || u.Hostname() != "caddy" {
			t.Errorf("%s=%q, want it to point at caddy", key, env(key))
			continue
		}
		srv, ok := cfg.serverOn(u.Port())
		if !ok {
			t.Errorf("%s=%q: Caddy does not listen on port %q", key, env(key), u.Port())
			continue
		}
		var to []string
		for _, v := range walk(srv.Routes, false) {
			to = append(to, v.dial)
		}
		if !slices.Contains(to, engines[engine]) {
			t.Errorf("%s=%q: that listener proxies to %v, not to %s", key, env(key), to, engines[engine])
		}
	}
}

// Caddy's health check is /healthz on a listener that serves the
// turnstile's status there, and Open WebUI waits for it.
func TestHealthcheck(t *testing.T) {
	p := project(t)
	s := service(t, p, "caddy")
	if s.HealthCheck == nil || len(s.HealthCheck.Test) < 2 {
		t.Fatal("caddy has no healthcheck")
	}
	var target *url.URL
	for _, arg := range s.HealthCheck.Test {
		if u, err := url.Parse(arg); err == nil && u.Scheme == "http" {
			target = u
		}
	}
	if target == nil || target.Path != "/healthz" {
		t.Fatalf("caddy's healthcheck %v does not fetch /healthz", s.HealthCheck.Test)
	}
	if h := target.Hostname(); h != "127.0.0.1" && h != "localhost" {
		t.Errorf("the healthcheck fetches %s: it runs inside the caddy container, want 127.0.0.1", target)
	}
	cfg := adapt(t, mountedCaddyfile(t, s))
	srv, ok := cfg.serverOn(target.Port())
	if !ok {
		t.Fatalf("the healthcheck fetches %s; Caddy does not listen on that port", target)
	}
	if !servesStatus(srv.Routes, "/healthz") {
		t.Errorf("the listener on %s does not serve gpu_turnstile_status at /healthz", target.Port())
	}
	dep, ok := service(t, p, "open-webui").DependsOn["caddy"]
	if !ok || dep.Condition != types.ServiceConditionHealthy {
		t.Errorf("open-webui does not wait for caddy to be healthy (depends_on %v)", dep)
	}
}

// The caddy service builds the image from examples/docker/Dockerfile
// with the repository as its context, and no bind-mounted data of the
// stack is sent along as build context.
func TestBuild(t *testing.T) {
	p := project(t)
	s := service(t, p, "caddy")
	if s.Build == nil {
		t.Fatal("caddy has no build section")
	}
	ctxDir, repoDir := abs(t, s.Build.Context), abs(t, repo)
	if ctxDir != repoDir {
		t.Errorf("build context %s, want the repository %s", ctxDir, repoDir)
	}
	dockerfile := s.Build.Dockerfile
	if !filepath.IsAbs(dockerfile) {
		dockerfile = filepath.Join(ctxDir, dockerfile)
	}
	if rel, _ := filepath.Rel(repoDir, dockerfile); rel != filepath.Join("examples", "docker", "Dockerfile") {
		t.Errorf("builds %s, want examples/docker/Dockerfile", rel)
	}
	ignored := dockerignore(t, filepath.Join(repoDir, ".dockerignore"))
	for name, svc := range p.Services {
		for _, v := range svc.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			src := abs(t, v.Source)
			if fi, err := os.Stat(src); err == nil && !fi.IsDir() {
				continue // a config file, such as the Caddyfile
			}
			rel, err := filepath.Rel(repoDir, src)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue // outside the build context
			}
			if !slices.ContainsFunc(ignored, func(pat string) bool {
				return rel == pat || strings.HasPrefix(rel, pat+string(filepath.Separator))
			}) {
				t.Errorf("%s mounts %s, inside the build context and not in .dockerignore: every build would send it to the engine", name, rel)
			}
		}
	}
}

// mountedCaddyfile is the host file the service mounts read-only at
// /etc/caddy/Caddyfile, the official image's default config.
func mountedCaddyfile(t *testing.T, s types.ServiceConfig) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target != "/etc/caddy/Caddyfile" {
			continue
		}
		if v.Type != types.VolumeTypeBind || !v.ReadOnly {
			t.Errorf("/etc/caddy/Caddyfile is mounted as %s read_only=%v, want a read-only bind mount", v.Type, v.ReadOnly)
		}
		src := abs(t, v.Source)
		if want := abs(t, "Caddyfile"); src != want {
			t.Errorf("mounts %s at /etc/caddy/Caddyfile, want %s", src, want)
		}
		return src
	}
	t.Fatal("caddy mounts nothing at /etc/caddy/Caddyfile")
	return ""
}

// The parts of Caddy's JSON config the checks read.
type caddyConfig struct {
	Apps struct {
		Turnstile struct {
			Turnstiles map[string]struct {
				Ollama string `json:"ollama"`
				Comfy  string `json:"comfy"`
			} `json:"turnstiles"`
		} `json:"gpu_turnstile"`
		HTTP struct {
			Servers map[string]server `json:"servers"`
		} `json:"http"`
	} `json:"apps"`
}

type server struct {
	Listen []string `json:"listen"`
	Routes []route  `json:"routes"`
}

type route struct {
	Match  []map[string]any `json:"match"`
	Handle []handler        `json:"handle"`
}

type handler struct {
	Handler   string  `json:"handler"`
	Class     string  `json:"class"`
	Routes    []route `json:"routes"`
	Upstreams []struct {
		Dial string `json:"dial"`
	} `json:"upstreams"`
}

func (c caddyConfig) listenPorts() map[string]server {
	ports := map[string]server{}
	for _, srv := range c.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			if _, port, err := net.SplitHostPort(l); err == nil {
				ports[port] = srv
			}
		}
	}
	return ports
}

func (c caddyConfig) serverOn(port string) (server, bool) {
	srv, ok := c.listenPorts()[port]
	return srv, ok
}

type proxy struct {
	dial    string
	guarded bool
}

// walk lists the reverse_proxy upstreams that are engines, in route
// order, each with whether a gpu_turnstile handler (not passthrough)
// runs before it on every request that reaches it: one in an earlier
// route without a matcher, or earlier in the same route.
func walk(routes []route, guarded bool) []proxy {
	var out []proxy
	for _, r := range routes {
		g := guarded
		for _, h := range r.Handle {
			switch h.Handler {
			case "gpu_turnstile":
				if h.Class != "passthrough" {
					g = true
				}
			case "subroute":
				out = append(out, walk(h.Routes, g)...)
			case "reverse_proxy":
				for _, u := range h.Upstreams {
					for _, addr := range engines {
						if u.Dial == addr {
							out = append(out, proxy{dial: u.Dial, guarded: g})
						}
					}
				}
			}
		}
		if len(r.Match) == 0 {
			guarded = g
		}
	}
	return out
}

// servesStatus reports whether requests to path end in
// gpu_turnstile_status.
func servesStatus(routes []route, path string) bool {
	for _, r := range routes {
		matches := len(r.Match) == 0
		for _, m := range r.Match {
			if ps, ok := m["path"].([]any); ok && slices.Contains(ps, any(path)) {
				matches = true
			}
		}
		if !matches {
			continue
		}
		for _, h := range r.Handle {
			if h.Handler == "gpu_turnstile_status" || (h.Handler == "subroute" && servesStatus(h.Routes, path)) {
				return true
			}
		}
	}
	return false
}

// adapt adapts a Caddyfile with a Caddy built with the plugin, and
// validates the result (`caddy adapt --validate` provisions every module
// without starting it).
func adapt(t *testing.T, caddyfile string) caddyConfig {
	t.Helper()
	out, err := exec.Command(caddyBinary(t), "adapt", "--validate", "--config", caddyfile, "--adapter", "caddyfile").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s does not adapt: %v\n%s", caddyfile, err, stderr)
	}
	var cfg caddyConfig
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("adapted %s: %v", caddyfile, err)
	}
	return cfg
}

var built struct {
	sync.Once
	bin, dir string
	err      error
}

// caddyBinary is $CADDY_BIN (CI passes the binary examples/docker/build.sh
// made, the one the image ships), or else one built here with
// ../../xcaddy.sh, once.
func caddyBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("CADDY_BIN"); bin != "" {
		return bin
	}
	built.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "compose-test-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "caddy")
		t.Logf("CADDY_BIN is not set: building Caddy with the plugin (%s build)", filepath.Join(repo, "xcaddy.sh"))
		cmd := exec.Command(filepath.Join(repo, "xcaddy.sh"), "build")
		cmd.Env = append(os.Environ(), "CADDY_BIN="+built.bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("building Caddy: %v", built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// dockerignore reads the patterns of a .dockerignore that name paths
// (no wildcards), cleaned.
func dockerignore(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") || strings.ContainsAny(line, "*?[") {
			continue
		}
		pats = append(pats, filepath.Clean(strings.TrimPrefix(line, "/")))
	}
	return pats
}
