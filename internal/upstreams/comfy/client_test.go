package comfy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

func TestPromptID(t *testing.T) {
	cases := []struct {
		body string
		id   string
		ok   bool
	}{
		{`{"prompt_id": "abc", "number": 1, "node_errors": {}}`, "abc", true},
		{`{"number": 1, "node_errors": {"x": [1,2]}, "prompt_id": "late"}`, "late", true},
		{`{"prompt_id": "abc", "number": 1, "node_er`, "abc", true}, // truncated after the id
		{`{"number": 1, "node_errors": {"x": "y"`, "", false},       // truncated before it
		{`{"error": {"type": "no_prompt"}, "node_errors": {}}`, "", false},
		{`{"node_errors": {"prompt_id": "nested"}}`, "", false},
		{`{"prompt_id": 42}`, "", false},
		{`{"prompt_id": ""}`, "", false},
		{`[]`, "", false},
		{``, "", false},
		{`not json`, "", false},
	}
	for _, tc := range cases {
		id, ok := comfy.PromptID([]byte(tc.body))
		if id != tc.id || ok != tc.ok {
			t.Errorf("PromptID(%q) = %q, %v; want %q, %v", tc.body, id, ok, tc.id, tc.ok)
		}
	}
}

func FuzzPromptID(f *testing.F) {
	f.Add([]byte(`{"prompt_id": "abc", "number": 1, "node_errors": {}}`))
	f.Add([]byte(`{"number": 1, "node_errors": {"x": [1,2]}, "prompt_id": "late"}`))
	f.Add([]byte(`{"prompt_id": "abc", "num`))
	f.Fuzz(func(t *testing.T, body []byte) {
		id, ok := comfy.PromptID(body)
		if ok && id == "" {
			t.Fatal("ok with an empty id")
		}
		if !ok {
			return
		}
		// A prefix that holds the whole id yields the same id.
		for n := len(body); n >= 0; n-- {
			if id2, ok2 := comfy.PromptID(body[:n]); !ok2 {
				break
			} else if id2 != id {
				t.Fatalf("prefix %d gave %q, whole body %q", n, id2, id)
			}
		}
	})
}

func newComfy(t *testing.T, opts comfytest.Options) (*comfytest.Server, *comfy.Client) {
	t.Helper()
	srv := comfytest.NewServer(gputest.New(), opts)
	t.Cleanup(srv.Close)
	c, err := comfy.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func submit(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const goodPrompt = `{"prompt":{"3":{"class_type":"KSampler","inputs":{}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"browser"}`

func TestWaitJobSeesTheEndThroughTheWebsocket(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.NewWatcher("turnstile-test", 10*time.Millisecond, 100*time.Millisecond, nil)
	go w.Run(ctx)
	for !w.Connected() {
		<-w.Changed()
	}
	status, body := submit(t, srv.URL+"/api/prompt", goodPrompt)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	id, ok := comfy.PromptID([]byte(body))
	if !ok {
		t.Fatalf("no prompt_id in %s", body)
	}
	// With the socket up and a 1 h poll, only the broadcast can end the wait.
	out, err := c.WaitJob(ctx, id, w, time.Hour/5)
	if err != nil || out != comfy.Success {
		t.Fatalf("outcome %q, %v", out, err)
	}
}

func TestWaitJobFallsBackToPolling(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: 30 * time.Millisecond})
	_, body := submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ := comfy.PromptID([]byte(body))
	out, err := c.WaitJob(context.Background(), id, nil, 5*time.Millisecond)
	if err != nil || out != comfy.Success {
		t.Fatalf("outcome %q, %v", out, err)
	}
}

func TestWaitJobOutcomes(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: time.Hour})
	ctx := context.Background()

	_, body := submit(t, srv.URL+"/prompt", `{"prompt":{"1":{"class_type":"Fail"},"9":{"class_type":"SaveImage"}},"extra_data":{"fake_duration_ms":1}}`)
	id, _ := comfy.PromptID([]byte(body))
	if out, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); out != comfy.Failed {
		t.Errorf("failing job: outcome %q, %v", out, err)
	}

	_, body = submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ = comfy.PromptID([]byte(body))
	waitRunning(t, c, id) // an interrupt only stops a running job
	interruptUntilEnded(t, srv.URL, c, id)
	if out, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); out != comfy.Interrupted {
		t.Errorf("interrupted job: outcome %q, %v", out, err)
	}

	_, body = submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ = comfy.PromptID([]byte(body))
	waitRunning(t, c, id)
	srv.Restart()
	if out, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); out != comfy.Lost {
		t.Errorf("job lost in a restart: outcome %q, %v", out, err)
	}
}

// interruptUntilEnded sends the interrupt until the job has a history
// entry: ComfyUI drops one that arrives as the job is taken from the queue.
func interruptUntilEnded(t *testing.T, url string, c *comfy.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Post(url+"/interrupt", "application/json", strings.NewReader(`{}`)); err == nil {
			resp.Body.Close()
		}
		if _, found, err := c.History(context.Background(), id); err == nil && found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never stopped", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRunning returns once the job is ComfyUI's running one.
func waitRunning(t *testing.T, c *comfy.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, _, err := c.Queue(context.Background())
		if err == nil && len(running) == 1 && running[0] == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never ran", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitJobWhenComfyIsGone(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: time.Hour})
	_, body := submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ := comfy.PromptID([]byte(body))
	srv.Close()
	out, err := c.WaitJob(context.Background(), id, nil, 5*time.Millisecond)
	if out != comfy.Lost || err != nil {
		t.Fatalf("outcome %q, %v; want lost when nothing listens", out, err)
	}
}

func TestValidationShape(t *testing.T) {
	srv, _ := newComfy(t, comfytest.Options{})
	for body, want := range map[string]string{
		`{"prompt":{"1":{"class_type":"Invalid"}}}`:                                                                 "invalid_prompt",
		`{"prompt":{"1":{"class_type":"ImageBlur","inputs":{"blur_radius":40}},"9":{"class_type":"PreviewImage"}}}`: "prompt_outputs_failed_validation",
		`{"prompt":{"1":{"class_type":"KSampler"}}}`:                                                                "prompt_no_outputs",
		`{"client_id":"x"}`: "no_prompt",
	} {
		status, resp := submit(t, srv.URL+"/prompt", body)
		if status != 400 || !strings.Contains(resp, want) || !strings.Contains(resp, "node_errors") {
			t.Errorf("%s: %d %s, want 400 %s", body, status, resp, want)
		}
	}
	if status, _ := submit(t, srv.URL+"/prompt", `not json`); status != 500 {
		t.Errorf("non-JSON body: %d, want 500", status)
	}
}

func TestFreeAndConfirm(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: 10 * time.Millisecond, FreeDelay: 50 * time.Millisecond})
	ctx := context.Background()
	if got, err := c.FreeAndConfirm(ctx, 10*time.Millisecond); err != nil || got != comfy.FreedNothingHeld {
		t.Fatalf("free with nothing loaded: %v %v", got, err)
	}
	_, body := submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ := comfy.PromptID([]byte(body))
	if _, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if srv.Reserved() == 0 {
		t.Fatal("the fake frees without being asked")
	}
	if got, err := c.FreeAndConfirm(ctx, 10*time.Millisecond); err != nil || got != comfy.FreedConfirmed {
		t.Fatalf("free after a job: %v %v", got, err)
	}
	if srv.Reserved() != 0 {
		t.Fatal("confirmed before the free took effect")
	}
}

// ComfyUI gives PyTorch's reserved memory back only at the end of a free
// that moves every model off the GPU first: a reading that has not moved
// for a while is no answer, and the free is waited for.
func TestFreeAndConfirmWaitsForASlowFree(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: 10 * time.Millisecond, FreeDelay: 1500 * time.Millisecond})
	ctx := context.Background()
	_, body := submit(t, srv.URL+"/prompt", goodPrompt)
	id, _ := comfy.PromptID([]byte(body))
	if _, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FreeAndConfirm(ctx, 10*time.Millisecond); err != nil || got != comfy.FreedConfirmed {
		t.Fatalf("slow free: %v %v, want confirmed", got, err)
	}
	if srv.Reserved() != 0 {
		t.Fatal("confirmed before the free took effect")
	}
}

// A reading that never moves keeps the free unconfirmed until the
// deadline, which is an error; a server without /system_stats cannot
// confirm; a CPU device is no GPU reading, said at once.
func TestFreeAndConfirmWithoutUsefulStats(t *testing.T) {
	static := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/system_stats" {
			io.WriteString(w, `{"devices":[{"type":"cuda","index":0,"vram_total":25769803776,"torch_vram_total":25769803776}]}`)
		}
	}))
	defer static.Close()
	c, _ := comfy.NewClient(static.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if got, err := c.FreeAndConfirm(ctx, 50*time.Millisecond); err == nil || got != comfy.FreedUnverified {
		t.Fatalf("static stats: %v %v, want unverified with an error at the deadline", got, err)
	}
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	c, _ = comfy.NewClient(none.URL, nil)
	if got, _ := c.FreeAndConfirm(context.Background(), 50*time.Millisecond); got != comfy.FreedUnverified {
		t.Fatalf("no stats: %v", got)
	}
	_, c = newComfy(t, comfytest.Options{Device: "cpu"})
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := c.FreeAndConfirm(ctx, 50*time.Millisecond); got != comfy.FreedUnverified || !errors.Is(err, comfy.ErrNoGPUReading) {
		t.Fatalf("cpu device: %v %v, want ErrNoGPUReading (not a wait for a reading that never comes)", got, err)
	}
}

func TestQueueLists(t *testing.T) {
	srv, c := newComfy(t, comfytest.Options{JobDuration: time.Hour})
	a := srv.Submit(time.Hour)
	b := srv.Submit(time.Hour)
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, pending, err := c.Queue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(running) == 1 && running[0] == a && len(pending) == 1 && pending[0] == b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %v %v", running, pending)
		}
		time.Sleep(time.Millisecond)
	}
}
