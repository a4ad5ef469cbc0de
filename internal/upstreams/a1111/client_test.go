package a1111_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

func newFake(t *testing.T, opts a1111test.Options) (*a1111test.Server, *a1111.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := a1111test.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	c, err := a1111.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

func waitEvent(t *testing.T, gpu *gputest.GPU, substr string) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "a1111", substr) >= 0 }) {
		t.Fatalf("no %q event:\n%s", substr, gputest.Dump(gpu.Events()))
	}
}

func closed(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not end in 10s")
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:7860", "ftp://x", "http://"} {
		if _, err := a1111.NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestProgressIdleAndDuringAJob(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newFake(t, a1111test.Options{Steps: 4})
	ctx := context.Background()
	if p, err := c.Progress(ctx); err != nil || p.JobCount != 0 || p.Progress != 0 || p.Job != "" {
		t.Fatalf("idle progress %+v, %v", p, err)
	}
	resume := srv.HoldJobs()
	done := srv.StartUIJob(40 * time.Millisecond)
	waitEvent(t, gpu, "job 1 ui held after step 1")
	p, err := c.Progress(ctx)
	if err != nil || p.JobCount != 1 || !strings.HasPrefix(p.Job, "task(") || p.SamplingStep != 1 || p.SamplingSteps != 4 || p.Progress <= 0 {
		t.Fatalf("progress during a UI job %+v, %v", p, err)
	}
	resume()
	closed(t, done)
}

// WaitIdle returns only once the job has ended, and a bounded wait on a
// busy server says what it still runs.
func TestWaitIdleWaitsForTheRunningJob(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	done := srv.StartUIJob(30 * time.Millisecond)
	waitEvent(t, gpu, "job 1 ui held")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitIdle(ctx, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "task(") {
		t.Fatalf("WaitIdle on a held job: %v, want an error naming the job", err)
	}
	resume()
	if err := c.WaitIdle(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if gputest.Index(gpu.Events(), 0, "a1111", "job 1 ui end") < 0 {
		t.Fatal("WaitIdle returned before the job ended")
	}
	closed(t, done)
}

// A job that has begun but still loads its model shows job_count -1: that
// is busy too.
func TestWaitIdleCountsAJobLoadingItsModelAsBusy(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newFake(t, a1111test.Options{NotLoadedAtStart: true, LoadDelay: time.Hour})
	srv.StartUIJob(time.Millisecond)
	waitEvent(t, gpu, "checkpoint on GPU")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitIdle(ctx, 10*time.Millisecond); err == nil {
		t.Fatal("WaitIdle called a loading job idle")
	}
}

func TestFreeAndConfirmThenReload(t *testing.T) {
	t.Parallel()
	for _, forge := range []bool{false, true} {
		srv, c, gpu := newFake(t, a1111test.Options{Forge: forge})
		ctx := context.Background()
		confirmed, err := c.FreeAndConfirm(ctx, 20*time.Millisecond)
		if err != nil || !confirmed {
			t.Fatalf("forge=%v: FreeAndConfirm %v, %v", forge, confirmed, err)
		}
		if srv.OnGPU() || gpu.Users("a1111") != 0 || srv.Unloads() != 1 {
			t.Fatalf("forge=%v: confirmed, yet the checkpoint is on the GPU", forge)
		}
		if m, err := c.Memory(ctx); err != nil || !m.CUDA || m.Reserved > a1111.FreedFloor {
			t.Fatalf("forge=%v: memory after the free %+v, %v", forge, m, err)
		}
		if err := c.ReloadCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
		// A1111 needs the reload; Forge's does nothing and reloads at the
		// next generation.
		if srv.OnGPU() == forge || srv.Reloads() != 1 {
			t.Fatalf("forge=%v: on GPU after ReloadCheckpoint: %v", forge, srv.OnGPU())
		}
	}
}

func TestFreeAndConfirmWithoutCUDASaysSo(t *testing.T) {
	t.Parallel()
	srv, c, _ := newFake(t, a1111test.Options{NoCUDA: true})
	confirmed, err := c.FreeAndConfirm(context.Background(), 20*time.Millisecond)
	if confirmed || !errors.Is(err, a1111.ErrNoGPUReading) || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("FreeAndConfirm without CUDA: %v, %v; want unconfirmed and ErrNoGPUReading", confirmed, err)
	}
	if srv.Unloads() != 1 || srv.OnGPU() {
		t.Fatal("the free was not sent")
	}
}

// stub answers /memory with reserved bytes and the unload with status.
func stub(t *testing.T, reserved int64, unloadStatus int) *a1111.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/sdapi/v1/memory":
			w.Write([]byte(`{"ram":{"free":1.5e10,"used":6000000000,"total":6.4e10},"cuda":{"system":{"free":1,"used":2,"total":3},` +
				`"reserved":{"current":` + strconv.FormatInt(reserved, 10) + `,"peak":` + strconv.FormatInt(reserved, 10) + `}}}`))
		case "/sdapi/v1/unload-checkpoint":
			w.WriteHeader(unloadStatus)
			if unloadStatus != 200 {
				w.Write([]byte(`{"error":"RuntimeError","detail":"","body":"","errors":"CUDA error: an illegal memory access"}`))
				return
			}
			w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := a1111.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFreeAndConfirmTimesOutWhileMemoryStaysReserved(t *testing.T) {
	t.Parallel()
	c := stub(t, 6<<30, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	confirmed, err := c.FreeAndConfirm(ctx, 20*time.Millisecond)
	if confirmed || err == nil || !strings.Contains(err.Error(), "still reserves 6144 MiB") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FreeAndConfirm %v, %v; want a timeout naming the 6144 MiB still reserved", confirmed, err)
	}
}

func TestFreeAndConfirmReportsAFailedUnload(t *testing.T) {
	t.Parallel()
	c := stub(t, 6<<30, 500)
	confirmed, err := c.FreeAndConfirm(context.Background(), 20*time.Millisecond)
	var se *a1111.StatusError
	if confirmed || !errors.As(err, &se) || se.Status != 500 || se.Message != "RuntimeError" {
		t.Fatalf("FreeAndConfirm %v, %v; want the 500 as a StatusError", confirmed, err)
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	_, c, _ := newFake(t, a1111test.Options{CheckpointBytes: 3 << 30})
	m, err := c.Memory(context.Background())
	if err != nil || !m.CUDA || m.Reserved < 3<<30 || m.SystemTotal != 24<<30 || m.SystemFree >= m.SystemTotal {
		t.Fatalf("memory %+v, %v", m, err)
	}
	_, c, _ = newFake(t, a1111test.Options{NoCUDA: true})
	if m, err := c.Memory(context.Background()); err != nil || m.CUDA || m.CUDAError != "unavailable" {
		t.Fatalf("memory without CUDA %+v, %v", m, err)
	}
}

// Interrupt answers at once; the job stops at its next step.
func TestInterruptEndsTheRunningJob(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newFake(t, a1111test.Options{JobDuration: 60 * time.Millisecond})
	resume := srv.HoldJobs()
	defer resume()
	done := srv.StartUIJob(60 * time.Millisecond)
	waitEvent(t, gpu, "job 1 ui held")
	if err := c.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed(t, done)
	waitEvent(t, gpu, "job 1 ui end: interrupted")
}

func TestRefusedWhenNothingListens(t *testing.T) {
	t.Parallel()
	srv, c, _ := newFake(t, a1111test.Options{})
	srv.Close()
	if _, err := c.Progress(context.Background()); !a1111.Refused(err) {
		t.Fatalf("err %v, want connection refused", err)
	}
}
