package a1111test_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Unknown routes answer FastAPI's 404 {"detail":"Not Found"}; a known
// route with another method FastAPI's 405.
func TestUnknownRoutesAreFastAPIs404(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, a1111test.Options{})
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/sdapi/v1/nope", 404, `{"detail":"Not Found"}`},
		{http.MethodPost, "/api/generate", 404, `{"detail":"Not Found"}`},
		{http.MethodGet, "/sdapi/v1/txt2img", 405, `{"detail":"Method Not Allowed"}`},
	} {
		if a := call(context.Background(), tc.method, srv.URL()+tc.path, ""); a.status != tc.status || a.body != tc.body {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, a.status, a.body, tc.status, tc.body)
		}
	}
}

// Errors raised by the routes come in A1111's shape
// {"error","detail","body","errors"}, with the exception's status.
func TestRouteErrorsHaveA1111sShape(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, a1111test.Options{})
	for _, tc := range []struct {
		path, body string
		status     int
		detail     string
	}{
		{"img2img", `{"prompt":"x"}`, 404, "Init image not found"},
		{"interrogate", `{"model":"clip"}`, 404, "Image not found"},
		{"interrogate", `{"image":"` + img + `","model":"blip9"}`, 404, "Model not found"},
		{"extra-single-image", `{"image":""}`, 500, "Invalid encoded image"},
	} {
		a := post(t, srv.URL()+"/sdapi/v1/"+tc.path, tc.body)
		e := decode(t, a.body)
		if a.status != tc.status || len(e) != 4 || e["error"] != "HTTPException" || e["detail"] != tc.detail || e["body"] != "" {
			t.Errorf("%s %s: %d %s, want %d with detail %q", tc.path, tc.body, a.status, a.body, tc.status, tc.detail)
		}
	}
}

// The extras and interrogate answers: {"html_info","image"},
// {"html_info","images"}, {"caption"}. Their models occupy the GPU for
// the job, whether or not the checkpoint is there.
func TestAuxiliaryRoutesAnswerAndOccupyTheGPU(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{NotLoadedAtStart: true})
	for _, tc := range []struct{ path, body, key string }{
		{"extra-single-image", `{"image":"` + img + `"}`, "image"},
		{"extra-batch-images", `{"imageList":[{"data":"` + img + `","name":"a"},{"data":"` + img + `","name":"b"}]}`, "images"},
		{"interrogate", `{"image":"` + img + `"}`, "caption"},
	} {
		a := post(t, srv.URL()+"/sdapi/v1/"+tc.path, tc.body)
		if m := decode(t, a.body); a.status != 200 || m[tc.key] == nil {
			t.Errorf("%s: %d %s, want %q", tc.path, a.status, a.body, tc.key)
		}
	}
	if n := len(decode(t, post(t, srv.URL()+"/sdapi/v1/extra-batch-images",
		`{"imageList":[{"data":"`+img+`"},{"data":"`+img+`"}]}`).body)["images"].([]any)); n != 2 {
		t.Errorf("extra-batch-images made %d images of 2", n)
	}
	ev := gpu.Events()
	if gputest.Index(ev, 0, "a1111", "extras model on GPU for job 1") < 0 || gputest.Index(ev, 0, "a1111", "interrogate model on GPU") < 0 {
		t.Fatalf("no occupancy for the auxiliary models:\n%s", gputest.Dump(ev))
	}
	if gpu.Users("a1111") != 0 || srv.OnGPU() {
		t.Fatal("an auxiliary job left memory behind, or loaded the checkpoint")
	}
}

// A CLIP interrogation shows in /progress as "interrogate" with job_count
// -1 (its own state.begin); a deepdanbooru one calls no state.begin, so it
// holds the lock and the GPU without showing in /progress at all.
func TestInterrogationsInProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, job string
		count      float64
	}{{"clip", "interrogate", -1}, {"deepdanbooru", "", 0}} {
		srv, gpu := newFake(t, a1111test.Options{})
		resume := srv.HoldJobs()
		res := postAsync(srv.URL()+"/sdapi/v1/interrogate", `{"image":"`+img+`","model":"`+tc.model+`"}`)
		waitEvent(t, gpu, 0, "job 1 interrogate held")
		if _, st := progressState(t, srv); st["job"] != tc.job || num(st["job_count"]) != tc.count {
			t.Errorf("%s: state %v, want job %q, job_count %v", tc.model, st, tc.job, tc.count)
		}
		if gpu.Users("a1111") != 2 {
			t.Errorf("%s: users %d, want the checkpoint and the interrogator", tc.model, gpu.Users("a1111"))
		}
		resume()
		if a := recv(t, res); a.status != 200 {
			t.Errorf("%s: %d %s", tc.model, a.status, a.body)
		}
	}
}

// A1111 runs its routes in a thread pool that a client going away does
// not stop: a txt2img whose client gave up while it waited for the lock
// still runs when its turn comes.
func TestAbandonedRequestStillRuns(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	first := postAsync(srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "job 1 txt2img held")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan answer, 1)
	go func() { gone <- call(ctx, http.MethodPost, srv.URL()+"/sdapi/v1/txt2img", txt2img) }()
	waitEvent(t, gpu, 0, "job 2 txt2img waits for the queue lock")
	cancel()
	if a := recv(t, gone); a.err == nil {
		t.Fatalf("the cancelled request answered: %d %s", a.status, a.body)
	}
	resume()
	recv(t, first)
	waitEvent(t, gpu, 0, "job 2 txt2img end: finished")
	if srv.Jobs() != 2 {
		t.Fatalf("Jobs %d, want 2", srv.Jobs())
	}
}

// The refresh routes take the queue lock too, with no job, and answer
// null.
func TestRefreshRoutesWaitForTheQueue(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	go call(context.Background(), http.MethodPost, srv.URL()+"/sdapi/v1/extra-single-image", `{"image":"`+img+`"}`)
	waitEvent(t, gpu, 0, "job 1 extras held")
	res := postAsync(srv.URL()+"/sdapi/v1/refresh-checkpoints", "")
	waitEvent(t, gpu, 0, "/sdapi/v1/refresh-checkpoints waits for the queue lock")
	resume()
	if a := recv(t, res); a.status != 200 || a.body != "null" {
		t.Fatalf("refresh-checkpoints: %d %s, want 200 null", a.status, a.body)
	}
}
