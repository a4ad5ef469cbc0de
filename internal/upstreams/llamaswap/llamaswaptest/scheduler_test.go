package llamaswaptest_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// unloadedBody is what a request waiting for an unloaded model gets.
var unloadedBody = envelope("unspecific error: group: model unloaded", "server_error", "internal_error")

// Requests that arrive during a start wait for it and share it.
func TestRequestsDuringAStartShareIt(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StartDelay: 300 * time.Millisecond})
	var answers []<-chan answer
	for range 3 {
		answers = append(answers, goChat(t, srv, qwen, false))
	}
	third := waitEvent(t, gpu, "request /v1/chat/completions "+qwen, 3)
	if ready := index(gpu, "ready "+qwen); ready >= 0 && ready < third {
		t.Skip("the machine was too slow for the requests to arrive during the start")
	}
	for _, ch := range answers {
		if a := <-ch; a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
	}
	if srv.Starts() != 1 {
		t.Fatalf("%d starts for three requests that came during one start", srv.Starts())
	}
}

// One model runs at a time: a request for another model queues until the
// running model's requests have drained, while requests for the running
// model are still served at once; then llama-swap stops the running
// process, and only once it has exited starts the other.
func TestSwapWaitsForTheRunningModelToDrain(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{})
	resume := srv.HoldChats()
	first := goChat(t, srv, qwen, true)
	waitEvent(t, gpu, "serve /v1/chat/completions "+qwen, 1)
	other := goChat(t, srv, gemma, false)
	waitEvent(t, gpu, "queued "+gemma, 1)
	second := goChat(t, srv, qwen, true)
	waitEvent(t, gpu, "serve /v1/chat/completions "+qwen, 2)
	if srv.State(gemma) != "stopped" || srv.State(qwen) != "ready" {
		t.Fatalf("while qwen serves: gemma %q, qwen %q", srv.State(gemma), srv.State(qwen))
	}
	resume()
	for _, ch := range []<-chan answer{first, second, other} {
		if a := <-ch; a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
	}
	ev := gpu.Events()
	exit, load := gputest.Index(ev, 0, "llamaswap", "exit "+qwen), gputest.Index(ev, 0, "llamaswap", "load "+gemma)
	if exit < 0 || load < exit {
		t.Fatalf("gemma loaded before qwen exited:\n%s", gputest.Dump(ev))
	}
	for _, e := range ev {
		if e.Users > 1 {
			t.Fatalf("two processes held the GPU at once:\n%s", gputest.Dump(ev))
		}
	}
}

// POST /api/models/unload answers 200 {"msg":"ok"} only after every process
// has exited; the requests the process was serving are cut (a stream ends
// without [DONE], cleanly; an answer not begun is a 502 with no body).
func TestUnloadAllIsSynchronousAndCutsRequests(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StopDelay: 100 * time.Millisecond})
	srv.HoldChats() // never resumed: only the unload ends them
	stream := goChat(t, srv, qwen, true)
	plain := goChat(t, srv, qwen, false)
	waitEvent(t, gpu, "generating /v1/chat/completions "+qwen, 2)
	a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", "")
	if a.status != 200 || a.body != "{\"msg\":\"ok\"}\n" || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("unload: %d %v %q", a.status, a.header, a.body)
	}
	if gpu.Users("llamaswap") != 0 || srv.State(qwen) != "stopped" || srv.Unloads() != 1 {
		t.Fatalf("when the unload answered: %d users, state %q", gpu.Users("llamaswap"), srv.State(qwen))
	}
	if s := <-stream; s.status != 200 || s.err != nil || !strings.Contains(s.body, "tok0") || strings.Contains(s.body, "[DONE]") {
		t.Fatalf("cut stream: %d %v %q; want a clean end without [DONE]", s.status, s.err, s.body)
	}
	if p := <-plain; p.status != http.StatusBadGateway || p.body != "" {
		t.Fatalf("cut answer: %d %q; want the proxy's empty 502", p.status, p.body)
	}
}

// Requests waiting for a model (for its start, or queued behind another
// model) get 500 "unspecific error: group: model unloaded"; a later
// request loads the model again.
func TestUnloadFailsWaitingRequestsAndLaterOnesLoadAgain(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StartDelay: time.Hour})
	starting := goChat(t, srv, qwen, false)
	waitEvent(t, gpu, "load "+qwen, 1)
	queued := goChat(t, srv, gemma, false)
	waitEvent(t, gpu, "queued "+gemma, 1)
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", ""); a.status != 200 {
		t.Fatalf("unload: %d %s", a.status, a.body)
	}
	for name, ch := range map[string]<-chan answer{"waiting for the start": starting, "queued": queued} {
		if a := <-ch; a.status != 500 || strings.TrimSpace(a.body) != unloadedBody {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
	}
	if index(gpu, "stop "+qwen) >= 0 || index(gpu, "exit "+qwen+" (start aborted)") < 0 {
		t.Fatalf("a starting process is killed, never \"stopping\":\n%s", gputest.Dump(gpu.Events()))
	}
	later := goChat(t, srv, qwen, false)
	waitEvent(t, gpu, "load "+qwen, 2)
	if srv.Starts() != 2 || srv.State(qwen) != "starting" {
		t.Fatalf("a later request: %d starts, state %q; want it loading again", srv.Starts(), srv.State(qwen))
	}
	srv.Close()
	<-later
}

// POST /api/models/unload/{model} answers text "OK" after that process has
// exited, or 404 "model not found"; legacy GET /unload answers "OK".
func TestUnloadOneModelAndLegacyUnload(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{})
	if a := chat(t, srv, qwen, false); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload/"+qwen, "", ""); a.status != 200 || a.body != "OK" || gpu.Users("llamaswap") != 0 {
		t.Fatalf("unload %s: %d %q, %d users", qwen, a.status, a.body, gpu.Users("llamaswap"))
	}
	want := envelope("model not found", "invalid_request_error", "not_found")
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload/nope", "", ""); a.status != 404 || strings.TrimSpace(a.body) != want {
		t.Fatalf("unload nope: %d %s", a.status, a.body)
	}
	chat(t, srv, gemma, false)
	if a := send(t, http.MethodGet, srv.URL()+"/unload", "", ""); a.status != 200 || a.body != "OK" || gpu.Users("llamaswap") != 0 {
		t.Fatalf("GET /unload: %d %q, %d users", a.status, a.body, gpu.Users("llamaswap"))
	}
	if srv.Unloads() != 3 {
		t.Fatalf("%d unloads counted, want 3", srv.Unloads())
	}
}

// A request that arrives during an unload waits for it (llama-swap's run
// loop is busy stopping), then loads its model again.
func TestRequestDuringAnUnloadLoadsAfterIt(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StopDelay: 200 * time.Millisecond})
	chat(t, srv, qwen, false)
	var wg sync.WaitGroup
	wg.Go(func() { send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", "") })
	waitEvent(t, gpu, "stop "+qwen, 1)
	if a := chat(t, srv, qwen, false); a.status != 200 {
		t.Fatalf("request during the unload: %d %s", a.status, a.body)
	}
	wg.Wait()
	ev := gpu.Events()
	unloaded, reload := gputest.Index(ev, 0, "llamaswap", "unload done"), gputest.Index(ev, index(gpu, "stop "+qwen), "llamaswap", "load "+qwen)
	if unloaded < 0 || reload < unloaded {
		t.Fatalf("the request loaded before the unload ended:\n%s", gputest.Dump(ev))
	}
}

// An unload that lands while a swap is stopping the old model does not
// cancel the swap's start: the swap's request gets the unload error, but
// the new model starts as the unload answers, and runs on after it.
func TestUnloadDuringASwapLetsTheNewModelStart(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StopDelay: 500 * time.Millisecond})
	chat(t, srv, qwen, false)
	swapping := goChat(t, srv, gemma, false)
	waitEvent(t, gpu, "stop "+qwen, 1)
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", ""); a.status != 200 {
		t.Fatalf("unload: %d %s", a.status, a.body)
	}
	if a := <-swapping; a.status != 500 || strings.TrimSpace(a.body) != unloadedBody {
		t.Fatalf("the swap's request: %d %s", a.status, a.body)
	}
	if unload, exit := index(gpu, "unload of"), index(gpu, "exit "+qwen); exit < unload {
		t.Skip("the machine was too slow for the unload to land during the swap's stop")
	}
	waitEvent(t, gpu, "load "+gemma, 1)
	if st := srv.State(gemma); st == "stopped" {
		t.Fatalf("gemma %q after the unload, want it starting or ready:\n%s", st, gputest.Dump(gpu.Events()))
	}
}
