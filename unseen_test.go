//go:build linux

package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// nobody is the user the Caddy of these tests runs as: it cannot map
// root's sockets to their processes, so llama-swap's are unseen.
const nobody = 65534

// unseenRig is llama-swap (real processes) and ComfyUI, run by root, in
// front of which a Caddy runs as nobody.
type unseenRig struct {
	t     *testing.T
	gpu   *gputest.GPU
	swap  *llamaswaptest.Server
	comfy *comfytest.Server
	llm   string // Caddy's site in front of llama-swap
	image string // and ComfyUI
	admin string
}

// startUnseen starts the rig; withCard puts a fake nvidia-smi on Caddy's
// PATH and reads the card with it.
func startUnseen(t *testing.T, withCard bool) *unseenRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run Caddy as another user than the engines")
	}
	dir, err := os.MkdirTemp("", "gpu-turnstile-unseen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	r := &unseenRig{t: t, gpu: gputest.New()}
	r.gpu.SetMemory(24 << 30)
	r.swap = llamaswaptest.NewServer(r.gpu, llamaswaptest.Options{Processes: t, ModelBytes: 4 << 30})
	r.comfy = comfytest.NewServer(r.gpu, comfytest.Options{JobDuration: 20 * time.Millisecond})
	t.Cleanup(func() {
		r.swap.Close()
		r.comfy.Close()
	})
	bin := filepath.Join(dir, "caddy")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o700)
	os.Chown(data, nobody, nobody)
	card, path := "", os.Getenv("PATH")
	if withCard {
		smiDir := filepath.Join(dir, "smi")
		os.Mkdir(smiDir, 0o755)
		r.gpu.FakeSMI(smiDir)
		card = "vram_probe nvidia-smi\n\t\tmin_free_vram 1MB"
		path = smiDir + ":" + path
	}
	llmPort, imagePort, adminPort := freePort(t), freePort(t), freePort(t)
	r.llm, r.image = fmt.Sprintf("http://127.0.0.1:%d", llmPort), fmt.Sprintf("http://127.0.0.1:%d", imagePort)
	r.admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	cfg := fmt.Sprintf(childGlobals+`	gpu_turnstile {
		llm llamaswap %s
		image comfyui %s
		unload_timeout 2s
		unload_poll_interval 20ms
		history_poll_interval 20ms
		%s
	}
}
:%d {
	bind 127.0.0.1
	handle /healthz {
		gpu_turnstile_status {
			detail full
		}
	}
	gpu_turnstile
	reverse_proxy %s
}
:%d {
	bind 127.0.0.1
	gpu_turnstile
	reverse_proxy %s
}
`, adminPort, r.swap.URL(), r.comfy.URL, card, llmPort, r.swap.URL(), imagePort, r.comfy.URL)
	cmd := childCaddy(t, bin, cfg, dir, data, "PATH="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if o := r.gpu.Overlaps(); len(o) > 0 {
			t.Errorf("the GPU was shared:\n%s\n%s", strings.Join(o, "\n"), gputest.Dump(r.gpu.Events()))
		}
	})
	r.waitStatus("Caddy up", func(st Status) bool { return len(st.Engines) > 0 })
	return r
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// status reads Caddy's status; ok is false while it does not answer.
func (r *unseenRig) status() (Status, bool) {
	resp, err := http.Get(r.llm + "/healthz")
	if err != nil {
		return Status{}, false
	}
	defer resp.Body.Close()
	var st Status
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// waitStatus polls the child Caddy's status (another process: no change
// signal reaches this one) until cond holds, for 15 s at most.
func (r *unseenRig) waitStatus(what string, cond func(Status) bool) Status {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if st, ok := r.status(); ok && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			st, _ := r.status()
			r.t.Fatalf("timed out waiting for %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *unseenRig) post(url, body string) (int, string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// loadModel chats through llama-swap and returns its model servers, once
// Caddy has seen llama-swap with a model (but not its processes).
func (r *unseenRig) loadModel() []procs.Proc {
	r.t.Helper()
	if code, body := r.post(r.llm+"/v1/chat/completions", `{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}`); code != 200 {
		r.t.Fatalf("chat: %d %s", code, body)
	}
	table, err := procs.Snapshot(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	servers := table.Descendants(int32(r.swap.Front().PID()))
	if len(servers) == 0 {
		r.t.Fatal("llama-swap started no model server")
	}
	st := r.waitStatus("llama-swap's model seen, its processes unseen", func(st Status) bool {
		return engineOfKind(st, "llamaswap").ProcessesUnseen && len(engineOfKind(st, "llamaswap").Models) > 0
	})
	if n := engineOfKind(st, "llamaswap").Processes; n != 0 {
		r.t.Fatalf("Caddy, as another user, saw %d of llama-swap's processes", n)
	}
	return servers
}

// A Caddy that cannot see the engine's processes (another user's, without
// CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE) does not take a killed
// llama-swap for an empty one: without the card, the job is refused,
// saying why.
func TestUnseenEngineWithoutTheCardRefusesTheJob(t *testing.T) {
	r := startUnseen(t, false)
	servers := r.loadModel()
	defer killAll(servers)
	r.swap.Kill()
	code, body := r.post(r.image+"/prompt", promptBody(20))
	if code != 503 || !strings.Contains(body, "cannot be seen") {
		t.Fatalf("job: %d %s; want 503 saying its processes cannot be seen", code, body)
	}
	if r.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt")
	}
}

// With the card read, the job waits until the card no longer lists the
// model server, then runs.
func TestUnseenEngineIsShownGoneByTheCard(t *testing.T) {
	r := startUnseen(t, true)
	servers := r.loadModel()
	r.swap.Kill()
	done := make(chan struct{})
	var code int
	var body string
	go func() {
		code, body = r.post(r.image+"/prompt", promptBody(20))
		close(done)
	}()
	r.waitStatus("the job waits for the card", func(st Status) bool { return engineOfKind(st, "llamaswap").Waiting != "" })
	if r.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt while the model server held the card")
	}
	killAll(servers)
	<-done
	if code != 200 {
		t.Fatalf("job once the model server is gone: %d %s", code, body)
	}
}
