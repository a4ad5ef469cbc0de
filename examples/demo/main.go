// Command demo runs Caddy with the gpu_turnstile plugin in front of
// simulated Ollama and ComfyUI, plays a short scene and prints a timeline
// of what the GPU does, then keeps serving so you can try it with curl.
//
//	./xcaddy.sh demo            # builds ./caddy, then runs this
//	go run ./examples/demo -caddy ./caddy -once
package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

//go:embed Caddyfile
var caddyfile string

func main() {
	caddyBin := flag.String("caddy", "./caddy", "the Caddy binary built with the plugin")
	once := flag.Bool("once", false, "exit after the scene instead of serving on")
	llmPort := flag.Int("llm-port", 11434, "Caddy's Ollama-facing port (another is picked if busy)")
	imagePort := flag.Int("image-port", 8188, "Caddy's ComfyUI-facing port (another is picked if busy)")
	flag.Parse()
	if err := run(*caddyBin, *once, *llmPort, *imagePort); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	start time.Time
	out   sync.Mutex
	llm   string
	image string
	gpu   *gputest.GPU
}

func (d *demo) say(format string, args ...any) {
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Printf("%6.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(caddyBin string, once bool, llmPort, imagePort int) error {
	if _, err := os.Stat(caddyBin); err != nil {
		return fmt.Errorf("%s not found: build it with ./xcaddy.sh build", caddyBin)
	}
	d := &demo{start: time.Now(), gpu: gputest.New()}

	// Simulated services, with delays of the order of real ones (shortened).
	oll := ollamatest.NewUnstarted(d.gpu, ollamatest.Options{LoadDelay: 800 * time.Millisecond,
		UnloadDelay: 300 * time.Millisecond, Tokens: 25, TokenDelay: 60 * time.Millisecond})
	oll.Listener = listen(11435)
	oll.Start()
	defer oll.Close()
	cmf := comfytest.NewUnstarted(d.gpu, comfytest.Options{JobDuration: 3 * time.Second, FreeDelay: 200 * time.Millisecond})
	cmf.Listener = listen(8189)
	cmf.Start()
	defer cmf.Close()

	llmL, imageL, adminL := listen(llmPort), listen(imagePort), listen(0)
	ports := []int{port(llmL), port(imageL), port(adminL)}
	llmL.Close()
	imageL.Close()
	adminL.Close()
	d.llm = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	d.image = fmt.Sprintf("http://127.0.0.1:%d", ports[1])

	dir, err := os.MkdirTemp("", "gpu-turnstile-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(os.TempDir(), "gpu-turnstile-demo-caddy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(caddyBin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(),
		"OLLAMA_URL="+oll.URL, "COMFY_URL="+cmf.URL,
		fmt.Sprintf("LLM_PORT=%d", ports[0]), fmt.Sprintf("IMAGE_PORT=%d", ports[1]),
		fmt.Sprintf("ADMIN_ADDR=127.0.0.1:%d", ports[2]),
		"XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()

	fmt.Printf("gpu-turnstile demo: Caddy (%s) in front of simulated Ollama and ComfyUI\n", caddyBin)
	fmt.Printf("  Ollama-facing  %s  ->  simulated Ollama  %s\n", d.llm, oll.URL)
	fmt.Printf("  ComfyUI-facing %s  ->  simulated ComfyUI %s\n", d.image, cmf.URL)
	fmt.Printf("  Caddy's log: %s\n\n", logPath)
	if err := d.waitReady(); err != nil {
		return err
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go d.watchState(ctx)
	go d.watchGPU(ctx)
	d.scene()

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
  curl %[1]s/api/chat -d '{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}'
  curl %[2]s/api/prompt -d '{"prompt":{"3":{"class_type":"KSampler"},"9":{"class_type":"SaveImage"}}}'
  curl %[1]s/healthz
  open %[1]s/healthz?view=html in a browser for the live status page
Ctrl-C to stop.
`, d.llm, d.image)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}

// scene plays chats streaming, an image job arriving, chats waiting, the
// job ending, chats resuming and the warm-up.
func (d *demo) scene() {
	var wg sync.WaitGroup
	chat := func(name, model string) {
		defer wg.Done()
		start := time.Now()
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}]}`, model)
		resp, err := http.Post(d.llm+"/api/chat", "application/json", strings.NewReader(body))
		if err != nil {
			d.say("%s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err == nil {
			d.say("%s: first token after %.2fs (status %d)", name, time.Since(start).Seconds(), resp.StatusCode)
		}
		io.Copy(io.Discard, br)
		d.say("%s: done after %.2fs", name, time.Since(start).Seconds())
	}
	d.say("scene: two chats start streaming (llama3.2 and qwen3:8b)")
	wg.Add(2)
	go chat("chat A", "llama3.2")
	go chat("chat B", "qwen3:8b")
	time.Sleep(1200 * time.Millisecond)

	d.say("scene: an image prompt arrives while the chats stream")
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		resp, err := http.Post(d.image+"/api/prompt", "application/json", strings.NewReader(
			`{"prompt":{"3":{"class_type":"KSampler","inputs":{}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"demo"}`))
		if err != nil {
			d.say("image: %v", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			PromptID string `json:"prompt_id"`
		}
		json.Unmarshal(b, &out)
		d.say("image: ComfyUI accepted the prompt after %.2fs (prompt_id %s)", time.Since(start).Seconds(), short(out.PromptID))
	}()
	time.Sleep(300 * time.Millisecond)
	d.say("scene: a third chat arrives and has to wait for the image job")
	wg.Add(1)
	go chat("chat C", "llama3.2")
	wg.Wait()
	// Let the warm-up finish so the timeline shows it.
	d.gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		return gputest.Index(ev, gputest.Index(ev, 0, "comfy", "free"), "ollama", "load") >= 0 || d.stateIs("idle")
	})
	time.Sleep(1500 * time.Millisecond)
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
