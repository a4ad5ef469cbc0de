//go:build unix

package turnstile

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// A llama-swap whose processes are real: it is a process of its own on its
// port, and each model's server its child, in a process group of its own,
// charged on the simulated GPU for as long as it lives. Any image job that
// starts while one lives shares the GPU, which fails the test.
func swapMix(t *testing.T, opts llamaswaptest.Options, settings string) *mix {
	t.Helper()
	opts.Processes = t
	if opts.ModelBytes == 0 {
		opts.ModelBytes = 4 << 30
	}
	return newMix(t, mixOptions{engines: []string{"llamaswap", "comfyui"}, swap: opts, settings: settings})
}

// loadModel chats through llama-swap, so that it starts a model server,
// and waits until the turnstile has seen that server's processes. It
// returns the processes that hold the model (those that charge the GPU).
func (m *mix) loadModel(t *testing.T) []procs.Proc {
	t.Helper()
	if r := m.post(context.Background(), m.chatPath("llamaswap"), chatBody(m.chatModel("llamaswap"), false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	table, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	servers := table.Descendants(int32(m.swap.Front().PID()))
	if len(servers) == 0 {
		t.Fatal("llama-swap started no model server")
	}
	m.waitStatus("the model server seen", func(st Status) bool { return engineOfKind(st, "llamaswap").Processes >= len(servers) })
	return servers
}

// leftPIDs are the PIDs of the status's processes_left of llama-swap.
func leftPIDs(st Status) []int32 {
	var pids []int32
	for _, p := range engineOfKind(st, "llamaswap").ProcessesLeft {
		pids = append(pids, p.PID)
	}
	return pids
}

// killAll ends processes with SIGKILL.
func killAll(ps []procs.Proc) {
	for _, p := range ps {
		syscall.Kill(int(p.PID), syscall.SIGKILL)
	}
}

// jobStartedAfterExit checks on the GPU's timeline that the image job
// began after the last model server's charge ended.
func (m *mix) jobStartedAfterExit(t *testing.T) {
	t.Helper()
	ev := m.gpu.Events()
	start := gputest.Index(ev, 0, service("comfyui"), imageStartMark("comfyui"))
	if start < 0 {
		t.Fatalf("no image job on the timeline:\n%s", gputest.Dump(ev))
	}
	if users := usersAt(ev, service("llamaswap"), start); users != 0 {
		t.Fatalf("llama-swap's model servers held %d occupancies when the job started:\n%s", users, gputest.Dump(ev))
	}
}

// llama-swap killed with SIGKILL leaves its model server running with its
// model (its own process group): the next image job waits for it, the
// status naming it, and starts once it is gone.
func TestKilledLlamaSwapsModelServerKeepsTheGPU(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{}, "unload_timeout 10s")
	servers := m.loadModel(t)
	m.swap.Kill()

	job := m.postAsync(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	st := m.waitStatus("the job waits for the orphan", func(st Status) bool { return len(leftPIDs(st)) > 0 })
	for _, p := range servers {
		if !slices.Contains(leftPIDs(st), p.PID) {
			t.Errorf("processes_left %v lacks model server %d", leftPIDs(st), p.PID)
		}
	}
	if w := engineOfKind(st, "llamaswap").Waiting; !strings.Contains(w, "refuses connections") {
		t.Errorf("waiting %q", w)
	}
	if m.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt while the orphan held the GPU")
	}
	killAll(servers)
	promptID(t, <-job)
	m.waitIdle()
	m.jobStartedAfterExit(t)
}

// Past unload_timeout the job is refused, naming the engine and the PIDs
// left; a forced end forgets them, and the next job runs (the operator
// vouches for what the card holds: here the orphan is killed first).
func TestKilledLlamaSwapsOrphanPastUnloadTimeout(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{}, "unload_timeout 2s")
	servers := m.loadModel(t)
	m.swap.Kill()
	r := m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	if r.status != 503 || !strings.Contains(r.body, "llamaswap") || !strings.Contains(r.body, strconv.Itoa(int(servers[0].PID))) {
		t.Fatalf("job with the orphan alive: %d %s; want 503 naming llamaswap and pid %d", r.status, r.body, servers[0].PID)
	}
	killAll(servers)
	if r := m.do(http.MethodDelete, m.admin+"/gpu_turnstile/job?force=1", ""); r.status != 200 || !strings.Contains(r.body, gpu.OutcomeForgotten) {
		t.Fatalf("forced end: %d %s", r.status, r.body)
	}
	promptID(t, m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20)))
	m.waitIdle()
}

// A restarted llama-swap lists nothing while its predecessor's model
// server still runs: that empty list is no proof.
func TestRestartedLlamaSwapListsNothingWhileTheOrphanLives(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{}, "unload_timeout 10s")
	servers := m.loadModel(t)
	m.swap.Restart()
	job := m.postAsync(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	st := m.waitStatus("the job waits for the orphan", func(st Status) bool { return len(leftPIDs(st)) > 0 })
	if w := engineOfKind(st, "llamaswap").Waiting; !strings.Contains(w, "lists no model") {
		t.Errorf("waiting %q", w)
	}
	if m.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt while the orphan held the GPU")
	}
	killAll(servers)
	promptID(t, <-job)
	m.waitIdle()
	m.jobStartedAfterExit(t)
}

// llama-swap's SIGTERM closes its port at once, but stops its model
// servers only once the requests in flight have drained, then after their
// stop time: the image job that waited for the stream starts only after
// the model server has exited.
func TestLlamaSwapsShutdownDrainsBeforeTheJob(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{Tokens: 40, TokenDelay: 10 * time.Millisecond, StopDelay: 300 * time.Millisecond},
		"unload_timeout 10s")
	m.loadModel(t)
	ctx := context.Background()
	from := len(m.gpu.Events())
	stream := m.postAsync(ctx, m.chatPath("llamaswap"), chatBody(m.chatModel("llamaswap"), true))
	if !m.gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		return gputest.Index(ev, from, service("llamaswap"), "generating") >= 0
	}) {
		t.Fatal("the stream did not reach llama-swap")
	}
	job := m.postAsync(ctx, m.sites["comfyui"]+"/prompt", promptBody(20))
	m.waitStatus("the job waits", func(st Status) bool { return st.ImageWaiting == 1 })
	m.swap.Terminate()
	if r := <-stream; r.status != 200 {
		t.Fatalf("the stream: %d %s", r.status, r.body)
	}
	promptID(t, <-job)
	m.waitIdle()
	m.jobStartedAfterExit(t)
}

// With a shell script as llama-swap's cmd, the unload answers when the
// script has exited, while its child, which holds the model, lingers: the
// job starts only after that child has exited.
func TestAWrappersChildMustExitBeforeTheJob(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{Wrapper: true, Linger: 400 * time.Millisecond}, "unload_timeout 10s")
	m.loadModel(t)
	promptID(t, m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20)))
	m.waitIdle()
	m.jobStartedAfterExit(t)
}

// What was seen of llama-swap's model servers is kept in Caddy's storage:
// after Caddy restarts, a model server orphaned meanwhile is still known,
// although the new turnstile has never seen it.
func TestARestartedCaddyRemembersTheOrphan(t *testing.T) {
	m := swapMix(t, llamaswaptest.Options{}, "unload_timeout 10s")
	servers := m.loadModel(t)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	m.swap.Kill()
	m.load(m.config)

	job := m.postAsync(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	st := m.waitStatus("the job waits for the orphan", func(st Status) bool { return len(leftPIDs(st)) > 0 })
	if !slices.Contains(leftPIDs(st), servers[0].PID) {
		t.Fatalf("processes_left %v lacks the orphan %d", leftPIDs(st), servers[0].PID)
	}
	killAll(servers)
	promptID(t, <-job)
	m.waitIdle()
	m.jobStartedAfterExit(t)
}
