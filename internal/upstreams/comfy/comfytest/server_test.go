package comfytest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Each test here pins one fact of upstream-api.md about ComfyUI 0.3.64
// that the turnstile must cope with.

func newFake(t *testing.T, opts comfytest.Options) (*comfytest.Server, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := comfytest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	return srv, gpu
}

func post(t *testing.T, url, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func get(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func prompt(clientID, seed string, ms int) string {
	return `{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":` + seed + `}},"9":{"class_type":"SaveImage","inputs":{}}},` +
		`"client_id":"` + clientID + `","extra_data":{"fake_duration_ms":` + itoa(ms) + `}}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func promptID(t *testing.T, body string) string {
	t.Helper()
	var out struct {
		PromptID string `json:"prompt_id"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.PromptID == "" {
		t.Fatalf("no prompt_id in %s", body)
	}
	return out.PromptID
}

// socket opens /ws under a client id and returns its message types as
// they come.
func socket(t *testing.T, srv *comfytest.Server, clientID string) <-chan map[string]any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	conn, _, err := websocket.Dial(ctx, strings.Replace(srv.URL, "http", "ws", 1)+"/ws?clientId="+clientID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	out := make(chan map[string]any, 256)
	go func() {
		defer close(out)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var m map[string]any
			json.Unmarshal(b, &m)
			out <- m
		}
	}()
	first := <-out
	if first["type"] != "status" {
		t.Fatalf("first message %v, want status", first)
	}
	return out
}

func TestErrorShapes(t *testing.T) {
	srv, _ := newFake(t, comfytest.Options{})
	for body, want := range map[string]string{
		`{"prompt":{"1":{"class_type":"NoSuchNode"}}}`:                                                              `"type":"invalid_prompt"`,
		`{"prompt":{"1":{"class_type":"ImageBlur","inputs":{"blur_radius":40}},"9":{"class_type":"PreviewImage"}}}`: `"value_bigger_than_max"`,
		`{"prompt":{"1":{"class_type":"KSampler"}}}`:                                                                `"prompt_no_outputs"`,
		`{"client_id":"x"}`: `"no_prompt"`,
	} {
		if status, got, _ := post(t, srv.URL+"/prompt", body); status != 400 || !strings.Contains(got, want) {
			t.Errorf("%s: %d %s, want 400 with %s", body, status, got, want)
		}
	}
	for _, body := range []string{`not json`, `{"prompt":"a string"}`} {
		status, got, h := post(t, srv.URL+"/prompt", body)
		if status != 500 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") || !strings.Contains(got, "Server got itself in trouble") {
			t.Errorf("%s: %d %q %s, want aiohttp's 500 text", body, status, h.Get("Content-Type"), got)
		}
	}
	_, body, _ := post(t, srv.URL+"/api/prompt", prompt("", "1", 1))
	if !strings.Contains(body, `"number":0`) {
		t.Errorf("first prompt %s, want number 0", body)
	}
	if status, body, h := post(t, srv.URL+"/free", `{"unload_models":true}`); status != 200 || body != "" || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("/free: %d %q %q", status, body, h.Get("Content-Type"))
	}
}

// The job's own client gets ComfyUI's messages in ComfyUI's order; the
// history entry comes HistoryLag after the final message, with the queue
// change, and the job is announced twice (queued, taken).
func TestMessageOrderAndHistoryLag(t *testing.T) {
	srv, gpu := newFake(t, comfytest.Options{HistoryLag: 100 * time.Millisecond})
	own := socket(t, srv, "me")
	other := socket(t, srv, "someone")
	_, body, _ := post(t, srv.URL+"/prompt", prompt("me", "1", 20))
	id := promptID(t, body)
	var types []string
	for m := range own {
		types = append(types, m["type"].(string))
		if m["type"] == "executing" && m["data"].(map[string]any)["node"] == nil {
			break
		}
	}
	got := strings.Join(types, " ")
	want := "status status execution_start execution_cached executing progress_state executing progress_state executed execution_success status executing"
	if got != want {
		t.Fatalf("messages:\n got %s\nwant %s", got, want)
	}
	ev := gpu.Events()
	end, hist := gputest.Index(ev, 0, "comfy", "end execution_success"), gputest.Index(ev, 0, "comfy", "history "+id)
	if end < 0 || hist < end || ev[hist].At.Sub(ev[end].At) < 100*time.Millisecond {
		t.Fatalf("history must come HistoryLag after the final message:\n%s", gputest.Dump(ev))
	}
	for range 3 { // the other client sees only status broadcasts
		if m := <-other; m["type"] != "status" {
			t.Fatalf("another client got %v", m)
		}
	}
	// A re-run of the same graph is answered from the cache at once.
	_, body, _ = post(t, srv.URL+"/prompt", prompt("me", "1", 10_000))
	promptID(t, body)
	for m := range own {
		if m["type"] == "execution_cached" {
			if nodes := m["data"].(map[string]any)["nodes"].([]any); len(nodes) != 2 {
				t.Fatalf("cached nodes %v, want both", nodes)
			}
		}
		if m["type"] == "execution_success" {
			break
		}
	}
}

// /interrupt only sets a flag: the job stops InterruptDelay later.
func TestInterruptIsAsynchronous(t *testing.T) {
	srv, gpu := newFake(t, comfytest.Options{InterruptDelay: 300 * time.Millisecond})
	_, body, _ := post(t, srv.URL+"/prompt", prompt("", "1", 3_600_000))
	id := promptID(t, body)
	gpu.WaitFor(5*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "job "+id+" start") >= 0 })
	post(t, srv.URL+"/interrupt", `{"prompt_id":"`+id+`"}`)
	var queue struct {
		Running [][]any `json:"queue_running"`
	}
	get(t, srv.URL+"/queue", &queue)
	if len(queue.Running) != 1 {
		t.Fatal("the job stopped as soon as it was interrupted")
	}
	if !gpu.WaitFor(5*time.Second, func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "history "+id) >= 0
	}) {
		t.Fatal("the interrupted job never ended")
	}
	ev := gpu.Events()
	asked, end := gputest.Index(ev, 0, "comfy", "interrupt requested"), gputest.Index(ev, 0, "comfy", "end execution_interrupted")
	if ev[end].At.Sub(ev[asked].At) < 300*time.Millisecond {
		t.Fatalf("stopped too soon:\n%s", gputest.Dump(ev))
	}
	var hist map[string]struct {
		Status struct {
			StatusStr string `json:"status_str"`
		} `json:"status"`
	}
	get(t, srv.URL+"/history/"+id, &hist)
	if hist[id].Status.StatusStr != "error" {
		t.Fatalf("history %+v, want status_str error", hist)
	}
}

// An interrupt that arrives as the worker takes the job from the queue
// (queue_running shows it, it has not started) is dropped, as ComfyUI
// clears the flag when a job starts; one naming a pending job does
// nothing. The job runs to its end.
func TestInterruptAsTheJobIsTakenIsDropped(t *testing.T) {
	srv, gpu := newFake(t, comfytest.Options{TakeDelay: 200 * time.Millisecond, JobDuration: 50 * time.Millisecond})
	_, body, _ := post(t, srv.URL+"/prompt", prompt("", "1", 50))
	first := promptID(t, body)
	_, body, _ = post(t, srv.URL+"/prompt", prompt("", "2", 50))
	second := promptID(t, body)
	gpu.WaitFor(5*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "taken "+first) >= 0 })
	post(t, srv.URL+"/interrupt", `{"prompt_id":"`+first+`"}`)
	post(t, srv.URL+"/interrupt", `{"prompt_id":"`+second+`"}`)
	if !gpu.WaitFor(5*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "history "+second) >= 0 }) {
		t.Fatal("the jobs never ended")
	}
	ev := gpu.Events()
	if gputest.Index(ev, 0, "comfy", "interrupt dropped "+first) < 0 || gputest.Index(ev, 0, "comfy", "interrupt requested") >= 0 ||
		gputest.Index(ev, 0, "comfy", "end execution_interrupted") >= 0 {
		t.Fatalf("an interrupt as the job was taken, or of a pending job, took effect:\n%s", gputest.Dump(ev))
	}
}

// /free sent during a job acts right after it, before the next pending
// one, and PyTorch's reserved memory falls only at the free's end.
func TestFreeActsBetweenJobsAndFreesAtTheEnd(t *testing.T) {
	srv, gpu := newFake(t, comfytest.Options{FreeDelay: 200 * time.Millisecond})
	_, a, _ := post(t, srv.URL+"/prompt", prompt("", "1", 100))
	_, b, _ := post(t, srv.URL+"/prompt", prompt("", "2", 100))
	idA, idB := promptID(t, a), promptID(t, b)
	// The worker takes job A a moment after it is queued.
	gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "job "+idA+" start") >= 0 })
	post(t, srv.URL+"/free", `{"unload_models":true,"free_memory":true}`)
	if srv.Reserved() == 0 {
		t.Fatal("freed during the job")
	}
	gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "history "+idB) >= 0 })
	ev := gpu.Events()
	endA, freed, startB := gputest.Index(ev, 0, "comfy", "history "+idA), -1, gputest.Index(ev, 0, "comfy", "job "+idB+" start")
	for i, e := range ev {
		if e.Service == "comfy" && e.What == "free" {
			freed = i
		}
	}
	if endA < 0 || freed < endA || startB < freed {
		t.Fatalf("want job A's end, the free, then job B:\n%s", gputest.Dump(ev))
	}
}

// A second socket with a client id in use takes its messages; the old one
// stays open and hears nothing more.
func TestReusedClientIDSilencesTheOldSocket(t *testing.T) {
	srv, _ := newFake(t, comfytest.Options{})
	old := socket(t, srv, "same")
	current := socket(t, srv, "same")
	post(t, srv.URL+"/prompt", prompt("same", "1", 10))
	for m := range current { // the job's messages, to its end
		if m["type"] == "executing" && m["data"].(map[string]any)["node"] == nil {
			break
		}
	}
	select {
	case m, ok := <-old:
		if ok {
			t.Fatalf("the old socket got %v", m)
		}
		t.Fatal("the old socket was closed")
	default: // the fake sends to each socket in order: the old one was passed over
	}
	if srv.Sockets() != 2 {
		t.Fatalf("%d sockets open, want both", srv.Sockets())
	}
}

func TestCPUDevice(t *testing.T) {
	srv, _ := newFake(t, comfytest.Options{Device: "cpu"})
	var stats struct {
		Devices []map[string]any `json:"devices"`
	}
	get(t, srv.URL+"/system_stats", &stats)
	if len(stats.Devices) != 1 || stats.Devices[0]["type"] != "cpu" || stats.Devices[0]["index"] != nil {
		t.Fatalf("devices %v, want one cpu device with a null index", stats.Devices)
	}
}
