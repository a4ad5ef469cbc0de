// Command demo runs Caddy with the gpu_turnstile plugin in front of a
// simulated LLM engine and a simulated image engine sharing one simulated
// GPU, plays a short scene and prints a timeline of what the GPU does,
// then keeps serving so you can try it with curl.
//
// -engines picks the pair, one LLM kind and one image kind among the
// registry's kinds that have a fake (-h lists them); the default is
// Ollama and ComfyUI.
//
//	./xcaddy.sh demo                      # builds ./caddy, then runs this
//	./xcaddy.sh demo -engines llamacpp,a1111
//	go run ./examples/demo -caddy ./caddy -once
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds/kindstest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

//go:embed Caddyfile
var caddyfile string

type options struct {
	caddyBin           string
	once               bool
	llmPort, imagePort int
	llm, image         simulated
}

func main() {
	var o options
	flag.StringVar(&o.caddyBin, "caddy", "./caddy", "the Caddy binary built with the plugin")
	flag.BoolVar(&o.once, "once", false, "exit after the scene instead of serving on")
	flag.IntVar(&o.llmPort, "llm-port", 11434, "Caddy's LLM-facing port (another is picked if busy)")
	flag.IntVar(&o.imagePort, "image-port", 8188, "Caddy's image-facing port (another is picked if busy)")
	engines := flag.String("engines", defaultEngines(), "the simulated engines: one LLM kind ("+choices(engine.ClassLLM)+") and one image kind ("+choices(engine.ClassImage)+")")
	flag.Parse()
	var err error
	if o.llm, o.image, err = parseEngines(*engines); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	start     time.Time
	out       sync.Mutex
	llm       string // Caddy's LLM-facing URL
	image     string // Caddy's image-facing URL
	admin     string // Caddy's admin endpoint, host:port
	caddyBin  string
	llmKind   simulated
	imageKind simulated
	gpu       *gputest.GPU
}

func (d *demo) say(format string, args ...any) {
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Printf("%6.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(o options) error {
	if _, err := os.Stat(o.caddyBin); err != nil {
		return fmt.Errorf("%s not found: build it with ./xcaddy.sh build", o.caddyBin)
	}
	d := &demo{start: time.Now(), gpu: gputest.New(), llmKind: o.llm, imageKind: o.image, caddyBin: o.caddyBin}
	// LLM engines may share the GPU with one another; not with an image engine.
	d.gpu.ShareAmong(kindstest.LLMServices()...)

	// Where a fake can choose its port, it takes the one after Caddy's
	// that fronts it (Ollama 11435 behind 11434, ComfyUI 8189 behind 8188).
	llmOpts, imageOpts := llmTimings, imageTimings
	llmOpts.Port, imageOpts.Port = nextPort(o.llmPort), nextPort(o.imagePort)
	d.llmKind.start(d.gpu, llmOpts)
	defer d.llmKind.Close()
	// An LLM engine that loads its weights at launch (vLLM) and an image
	// engine that loads its checkpoint at launch (A1111) would both be on
	// the GPU before Caddy can do anything about it: the image engine then
	// starts without.
	imageOpts.EmptyAtStart = d.gpu.Users(d.llmKind.Service) > 0
	d.imageKind.start(d.gpu, imageOpts)
	defer d.imageKind.Close()
	llmURL, imageURL := d.llmKind.URL, d.imageKind.URL

	llmL, imageL, adminL := listen(o.llmPort), listen(o.imagePort), listen(0)
	ports := []int{port(llmL), port(imageL), port(adminL)}
	llmL.Close()
	imageL.Close()
	adminL.Close()
	d.llm = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	d.image = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	d.admin = fmt.Sprintf("127.0.0.1:%d", ports[2])

	dir, err := os.MkdirTemp("", "gpu-turnstile-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := append(os.Environ(),
		"LLM_KIND="+d.llmKind.kind.Name, "LLM_URL="+llmURL, "IMAGE_KIND="+d.imageKind.kind.Name, "IMAGE_URL="+imageURL, "WARM="+d.llmKind.warmLine(),
		fmt.Sprintf("LLM_PORT=%d", ports[0]), fmt.Sprintf("IMAGE_PORT=%d", ports[1]),
		"ADMIN_ADDR="+d.admin,
		"XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	logPath, stopCaddy, err := startCaddy(o.caddyBin, dir, env)
	if err != nil {
		return err
	}
	defer stopCaddy()

	d.header(o.caddyBin, llmURL, imageURL, logPath)
	if err := d.waitReady(); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go d.watchState(ctx)
	go d.watchGPU(ctx)
	d.scene()
	return d.finish(o.once)
}

// nextPort is the port after p, or 0 (any) if p is.
func nextPort(p int) int {
	if p == 0 {
		return 0
	}
	return p + 1
}

// startCaddy writes the Caddyfile into dir and runs Caddy on it with env,
// its output in a log file.
func startCaddy(caddyBin, dir string, env []string) (logPath string, stop func(), err error) {
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile), 0o644); err != nil {
		return "", nil, err
	}
	logPath = filepath.Join(os.TempDir(), "gpu-turnstile-demo-caddy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(caddyBin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", nil, err
	}
	return logPath, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logFile.Close()
	}, nil
}

func (d *demo) header(caddyBin, llmURL, imageURL, logPath string) {
	l, i := d.llmKind.kind.Title, d.imageKind.kind.Title
	facing := max(len(l), len(i)) + len("-facing")
	fmt.Printf("gpu-turnstile demo: Caddy (%s) in front of simulated %s and %s\n", caddyBin, l, i)
	fmt.Printf("  %-*s %s  ->  simulated %-*s %s\n", facing, l+"-facing", d.llm, facing-len("-facing"), l, llmURL)
	fmt.Printf("  %-*s %s  ->  simulated %-*s %s\n", facing, i+"-facing", d.image, facing-len("-facing"), i, imageURL)
	fmt.Printf("  admin endpoint: %s  (%s gpu-turnstile --address %[1]s status)\n", d.admin, caddyBin)
	fmt.Printf("  Caddy's log: %s\n\n", logPath)
}

// finish reports the overlaps and, unless once, serves on until a signal.
func (d *demo) finish(once bool) error {
	overlaps := d.gpu.Overlaps()
	fmt.Printf("\nGPU shared by both services: %d times (overlaps=%d)\n", len(overlaps), len(overlaps))
	if once {
		if len(overlaps) > 0 {
			return fmt.Errorf("the GPU was shared: %v", overlaps)
		}
		fmt.Println("demo finished")
		return nil
	}
	fmt.Printf(`
Still serving. Try, in another terminal:
  %s
  %s
  curl %s/healthz
  curl -N '%[3]s/healthz?view=events'   (the live events)
  open %[3]s/healthz?view=html in a browser for the live status page
  %[4]s gpu-turnstile --address %[5]s status
  %[4]s gpu-turnstile --address %[5]s hold --owner me --ttl 2m   (then: release ID)
  %[4]s gpu-turnstile --address %[5]s events
Ctrl-C to stop.
`, d.llmKind.tryLLM(d.llm), d.imageKind.tryImage(d.image), d.llm, d.caddyBin, d.admin)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}

func (d *demo) stateIs(s string) bool {
	st, err := d.status()
	return err == nil && st.State == s
}

type status struct {
	State        string `json:"state"`
	LLMInflight  int    `json:"llm_inflight"`
	ImagePending bool   `json:"image_pending"`
	LLMWaiting   int    `json:"llm_waiting"`
	Warming      bool   `json:"warming"`
	Job          *struct {
		Phase string `json:"phase"`
	} `json:"job"`
}

func (d *demo) status() (status, error) {
	var st status
	resp, err := http.Get(d.llm + "/healthz")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// watchState prints the turnstile's state whenever it changes.
func (d *demo) watchState(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		if st, err := d.status(); err == nil {
			line := fmt.Sprintf("state %-5s  llm in flight %d, waiting %d", strings.ToUpper(st.State), st.LLMInflight, st.LLMWaiting)
			if st.Job != nil {
				line += ", image job " + st.Job.Phase
			}
			if st.Warming {
				line += ", warming"
			}
			if line != last {
				d.say("[turnstile] %s", line)
				last = line
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// watchGPU prints what the simulated GPU sees.
func (d *demo) watchGPU(ctx context.Context) {
	seen := 0
	for ctx.Err() == nil {
		ch := d.gpu.Changed()
		ev := d.gpu.Events()
		for ; seen < len(ev); seen++ {
			e := ev[seen]
			if strings.HasPrefix(e.What, "request") {
				continue
			}
			d.say("[gpu] %-6s %s", e.Service, uuidRE.ReplaceAllStringFunc(e.What, short))
		}
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

func (d *demo) waitReady() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := d.status(); err == nil && st.State != "" {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("caddy did not answer on %s/healthz within 30s; see its log", d.llm)
}

// listen takes the port if it is free, or any free port.
func listen(p int) net.Listener {
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
		return l
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return l
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
