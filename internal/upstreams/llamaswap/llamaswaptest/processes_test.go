//go:build unix

package llamaswaptest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

const gib = 1 << 30

// running is /running's list.
func running(t *testing.T, srv *llamaswaptest.Server) []map[string]any {
	t.Helper()
	a := send(t, http.MethodGet, srv.URL()+"/running", "", "")
	var v struct {
		Running []map[string]any `json:"running"`
	}
	if a.err != nil || json.Unmarshal([]byte(a.body), &v) != nil {
		t.Fatalf("/running: %+v", a)
	}
	return v.Running
}

// proxyListener is the process listening on a /running entry's proxy
// port.
func proxyListener(t *testing.T, entry map[string]any) procs.Proc {
	t.Helper()
	u, err := url.Parse(entry["proxy"].(string))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	pid, l, err := procs.Listener(context.Background(), port)
	if err != nil || l != procs.Seen {
		t.Fatalf("proxy port %d: %v %v", port, l, err)
	}
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := tb.Get(pid)
	return p
}

func newProcFake(t *testing.T, opts llamaswaptest.Options) (*llamaswaptest.Server, *gputest.GPU) {
	opts.Processes = t
	opts.ModelBytes = 4 * gib
	return newFake(t, opts)
}

// A killed llama-swap refuses at once, while its model server lives on,
// re-parented, holding the GPU; a restarted one lists nothing while the
// orphan lives; the charge ends when the orphan is killed.
func TestProcessesKillLeavesTheModelServer(t *testing.T) {
	srv, gpu := newProcFake(t, llamaswaptest.Options{})
	if a := chat(t, srv, qwen, false); a.status != 200 {
		t.Fatalf("chat: %+v", a)
	}
	list := running(t, srv)
	if len(list) != 1 {
		t.Fatalf("/running %v", list)
	}
	server := proxyListener(t, list[0])
	front := srv.Front().PID()
	if int(server.PPID) != front {
		t.Fatalf("model server %+v, want a child of llama-swap %d", server, front)
	}
	srv.Kill()
	if c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://")); err == nil {
		c.Close()
		t.Fatal("the killed llama-swap's port accepts")
	}
	if gpu.Users("llamaswap") != 1 || gpu.Used() != 4*gib {
		t.Fatalf("after the kill: users %d used %d", gpu.Users("llamaswap"), gpu.Used())
	}
	srv.Restart()
	if list := running(t, srv); len(list) != 0 || gpu.Users("llamaswap") != 1 {
		t.Fatalf("restarted: /running %v with users %d, want none listed and the orphan charged", list, gpu.Users("llamaswap"))
	}
	if srv.Front().PID() == front {
		t.Fatal("the restart kept the PID")
	}
	syscall.Kill(int(server.PID), syscall.SIGKILL)
	waitEvent(t, gpu, "load "+qwen+" exit", 1)
	if gpu.Used() != 0 {
		t.Fatalf("used %d after the orphan's death", gpu.Used())
	}
	// The restarted llama-swap loads again.
	if a := chat(t, srv, qwen, false); a.status != 200 || gpu.Users("llamaswap") != 1 {
		t.Fatalf("chat after the restart: %+v", a)
	}
}

// The unload answers once the model server has exited: its charge has
// ended and its port is closed.
func TestProcessesUnloadEndsTheModelServer(t *testing.T) {
	srv, gpu := newProcFake(t, llamaswaptest.Options{StopDelay: 50 * time.Millisecond})
	chat(t, srv, qwen, false)
	server := proxyListener(t, running(t, srv)[0])
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", ""); a.status != 200 {
		t.Fatalf("unload: %+v", a)
	}
	tb, _ := procs.Snapshot(context.Background())
	if tb.Alive(server.ID) || gpu.Users("llamaswap") != 0 || gpu.Used() != 0 {
		t.Fatalf("after the unload: alive %v, users %d, used %d", tb.Alive(server.ID), gpu.Users("llamaswap"), gpu.Used())
	}
}

// With a wrapper, the unload answers when the shell has exited, while its
// child still holds the model.
func TestProcessesWrapperChildOutlivesTheUnload(t *testing.T) {
	srv, gpu := newProcFake(t, llamaswaptest.Options{Wrapper: true, Linger: 300 * time.Millisecond})
	chat(t, srv, qwen, false)
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", ""); a.status != 200 {
		t.Fatalf("unload: %+v", a)
	}
	if list := running(t, srv); len(list) != 0 || gpu.Users("llamaswap") != 1 {
		t.Fatalf("at the unload's answer: /running %v, users %d, want none listed and the grandchild charged", list, gpu.Users("llamaswap"))
	}
	waitEvent(t, gpu, "load "+qwen+" exit", 1)
}

// Terminate closes the port at once, drains the stream in flight to its
// end, then stops the model server.
func TestProcessesTerminateDrainsThenStops(t *testing.T) {
	srv, gpu := newProcFake(t, llamaswaptest.Options{})
	resume := srv.HoldChats()
	req, _ := http.NewRequest(http.MethodPost, srv.URL()+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+qwen+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	srv.Terminate()
	if c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://")); err == nil {
		c.Close()
		t.Fatal("the port accepts after SIGTERM")
	}
	if gpu.Users("llamaswap") != 1 {
		t.Fatal("the model server stopped before the drain")
	}
	resume()
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the drained stream: %q %v", rest, err)
	}
	waitEvent(t, gpu, "load "+qwen+" exit", 1)
	select {
	case <-srv.Front().Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("llama-swap did not exit")
	}
}
