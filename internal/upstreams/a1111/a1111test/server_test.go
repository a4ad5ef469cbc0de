package a1111test_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Each test here pins one fact of engines-api.md §4 (or, where it says
// so, of the A1111 source the sheet names) that the turnstile must cope
// with; a fake kinder than A1111 would make the turnstile's tests prove
// nothing.

func newFake(t *testing.T, opts a1111test.Options) (*a1111test.Server, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := a1111test.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	return srv, gpu
}

// httpClient bounds every call, so that a fake that never answers fails
// a test instead of hanging it.
var httpClient = &http.Client{Timeout: 20 * time.Second}

type answer struct {
	status int
	body   string
	err    error
}

func call(ctx context.Context, method, url, body string) answer {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, strings.TrimSpace(string(b)), err}
}

func post(t *testing.T, url, body string) answer {
	t.Helper()
	a := call(context.Background(), http.MethodPost, url, body)
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a
}

// closed waits for a job's done channel, failing the test instead of
// hanging it.
func closed(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not end in 10s")
	}
}

// postAsync sends a request and delivers its answer when it comes.
func postAsync(url, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- call(context.Background(), http.MethodPost, url, body) }()
	return ch
}

// recv waits for an answer, failing the test instead of hanging it.
func recv(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer in 10s")
		return answer{}
	}
}

func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	a := call(context.Background(), http.MethodGet, url, "")
	if a.err != nil || a.status != 200 {
		t.Fatalf("GET %s: %d %s %v", url, a.status, a.body, a.err)
	}
	return decode(t, a.body)
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %s", body)
	}
	return m
}

func progressState(t *testing.T, srv *a1111test.Server) (map[string]any, map[string]any) {
	t.Helper()
	p := getJSON(t, srv.URL()+"/sdapi/v1/progress?skip_current_image=true")
	return p, p["state"].(map[string]any)
}

func num(v any) float64 {
	f, _ := v.(json.Number).Float64()
	return f
}

// waitEvent waits for the first event of the fake, from index from on,
// whose text contains substr, and returns its index.
func waitEvent(t *testing.T, gpu *gputest.GPU, from int, substr string) int {
	t.Helper()
	i := -1
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		i = gputest.Index(ev, from, "a1111", substr)
		return i >= 0
	}) {
		t.Fatalf("no %q event:\n%s", substr, gputest.Dump(gpu.Events()))
	}
	return i
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

const (
	txt2img = `{"prompt":"a lighthouse","steps":20}`
	img     = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

// txt2img is synchronous: the request stays open for the whole job and
// answers 200 {"images":[b64],"parameters":{...},"info":"<json string>"}.
func TestTxt2imgAnswersAtTheJobsEnd(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	res := postAsync(srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "job 1 txt2img held")
	select {
	case a := <-res:
		t.Fatalf("answered during the job: %d %s", a.status, a.body)
	default:
	}
	resume()
	a := recv(t, res)
	if a.err != nil || a.status != 200 {
		t.Fatalf("txt2img: %d %s %v", a.status, a.body, a.err)
	}
	if i := gputest.Index(gpu.Events(), 0, "a1111", "job 1 txt2img end: finished"); i < 0 {
		t.Fatalf("answered, yet the job has not ended:\n%s", gputest.Dump(gpu.Events()))
	}
	m := decode(t, a.body)
	if got := keys(m); !slices.Equal(got, []string{"images", "info", "parameters"}) {
		t.Fatalf("keys %v", got)
	}
	images, _ := m["images"].([]any)
	if len(images) != 1 {
		t.Fatalf("images %v", m["images"])
	}
	if b, err := base64.StdEncoding.DecodeString(images[0].(string)); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("image is not a base64 PNG: %v", err)
	}
	params := m["parameters"].(map[string]any)
	if params["prompt"] != "a lighthouse" || num(params["steps"]) != 20 || num(params["width"]) != 512 {
		t.Fatalf("parameters %v, want the request with its defaults", params)
	}
	info, ok := m["info"].(string)
	if !ok || !json.Valid([]byte(info)) || !strings.Contains(info, `"prompt":"a lighthouse"`) {
		t.Fatalf("info %v, want a JSON string", m["info"])
	}
}

// The GPU routes (txt2img, img2img, extra-single-image, extra-batch-images,
// interrogate) and UI jobs run in ONE FIFO queue lock: one at a time, first
// come first served, the others waiting with their requests open.
func TestGPURoutesAndUIJobsShareOneFIFOQueue(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{JobDuration: 12 * time.Millisecond})
	resume := srv.HoldJobs()
	ui := srv.StartUIJob(12 * time.Millisecond)
	waitEvent(t, gpu, 0, "job 1 ui held")
	routes := []struct{ path, body, label string }{
		{"txt2img", txt2img, "txt2img"},
		{"img2img", `{"prompt":"x","init_images":["` + img + `"]}`, "img2img"},
		{"extra-single-image", `{"image":"` + img + `","upscaling_resize":2}`, "extras"},
		{"extra-batch-images", `{"imageList":[{"data":"` + img + `","name":"a.png"}]}`, "extras"},
		{"interrogate", `{"image":"` + img + `","model":"clip"}`, "interrogate"},
	}
	labels := []string{"job 1 ui"}
	var answers []<-chan answer
	for i, r := range routes {
		answers = append(answers, postAsync(srv.URL()+"/sdapi/v1/"+r.path, r.body))
		labels = append(labels, "job "+itoa(i+2)+" "+r.label)
		// Each request is in line before the next is sent.
		waitEvent(t, gpu, 0, labels[i+1]+" waits for the queue lock")
	}
	if n := srv.Waiting(); n != len(routes) {
		t.Fatalf("%d wait for the lock, want %d", n, len(routes))
	}
	// Requests waiting for the lock do not show in /progress.
	_, st := progressState(t, srv)
	if num(st["job_count"]) != 1 || !strings.HasPrefix(st["job"].(string), "task(") {
		t.Fatalf("progress state %v, want only the UI job", st)
	}
	resume()
	closed(t, ui)
	for i, ch := range answers {
		if a := recv(t, ch); a.err != nil || a.status != 200 {
			t.Fatalf("%s: %d %s %v", routes[i].path, a.status, a.body, a.err)
		}
	}
	ev := gpu.Events()
	last := -1
	for _, l := range labels {
		start := gputest.Index(ev, 0, "a1111", l+" start")
		end := gputest.Index(ev, 0, "a1111", l+" end")
		if start < last || end < start {
			t.Fatalf("%s ran out of turn or alongside another:\n%s", l, gputest.Dump(ev))
		}
		last = end
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// GET /sdapi/v1/progress has the sheet's exact shape; idle it answers
// progress 0, eta_relative 0, job_count 0.
func TestIdleProgressShape(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, a1111test.Options{})
	p, st := progressState(t, srv)
	if got := keys(p); !slices.Equal(got, []string{"current_image", "eta_relative", "progress", "state", "textinfo"}) {
		t.Fatalf("keys %v", got)
	}
	want := []string{"interrupted", "job", "job_count", "job_no", "job_timestamp", "sampling_step", "sampling_steps",
		"skipped", "stopping_generation"}
	if got := keys(st); !slices.Equal(got, want) {
		t.Fatalf("state keys %v, want %v", got, want)
	}
	if num(p["progress"]) != 0 || num(p["eta_relative"]) != 0 || num(st["job_count"]) != 0 || st["job"] != "" ||
		p["current_image"] != nil || p["textinfo"] != nil || st["interrupted"] != false {
		t.Fatalf("idle progress %v", p)
	}
}

// /progress is not under the queue lock: it answers during a job, with the
// job's name, its count and its sampling steps.
func TestProgressDuringAJob(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{Steps: 4})
	resume := srv.HoldJobs()
	defer resume()
	go call(context.Background(), http.MethodPost, srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "job 1 txt2img held after step 1")
	p, st := progressState(t, srv)
	if st["job"] != "scripts_txt2img" || num(st["job_count"]) != 1 || num(st["sampling_step"]) != 1 ||
		num(st["sampling_steps"]) != 4 {
		t.Fatalf("state %v", st)
	}
	if pr := num(p["progress"]); pr < 0.25 || pr > 0.27 || num(p["eta_relative"]) <= 0 {
		t.Fatalf("progress %v eta_relative %v, want 0.01+1/4 and a positive eta", p["progress"], p["eta_relative"])
	}
}

// State.begin sets job_count to -1 until the job knows its image count,
// which is after its model has loaded (A1111 shared_state.py, processing).
func TestJobCountIsMinusOneWhileAJobLoadsItsModel(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{NotLoadedAtStart: true, LoadDelay: time.Hour})
	go call(context.Background(), http.MethodPost, srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "checkpoint on GPU")
	p, st := progressState(t, srv)
	if num(st["job_count"]) != -1 || num(p["progress"]) != 0.01 {
		t.Fatalf("progress %v, want job_count -1 and progress 0.01", p)
	}
	if gpu.Users("a1111") != 1 {
		t.Fatal("a loading checkpoint holds no memory")
	}
}
