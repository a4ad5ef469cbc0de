package comfytest_test

import (
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

const gib = 1 << 30

// A job charges its peak while it runs; its models stay charged after
// it, until a free.
func TestJobAndModelBytes(t *testing.T) {
	gpu := gputest.New()
	gpu.SetMemory(24 * gib)
	srv := comfytest.NewServer(gpu, comfytest.Options{ModelBytes: 6 * gib, JobBytes: 10 * gib})
	t.Cleanup(srv.Close)
	_, body, _ := post(t, srv.URL+"/prompt", prompt("", "1", 300))
	id := promptID(t, body)
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "working memory of "+id) >= 0 }) {
		t.Fatalf("the job never started:\n%s", gputest.Dump(gpu.Events()))
	}
	if gpu.Used() != 10*gib {
		t.Fatalf("used %d during the job, want its 10 GiB peak", gpu.Used())
	}
	var stats struct {
		Devices []struct {
			VRAMTotal      int64 `json:"vram_total"`
			VRAMFree       int64 `json:"vram_free"`
			TorchVRAMTotal int64 `json:"torch_vram_total"`
			TorchVRAMFree  int64 `json:"torch_vram_free"`
		} `json:"devices"`
	}
	get(t, srv.URL+"/system_stats", &stats)
	if d := stats.Devices[0]; d.VRAMTotal != 24*gib || d.TorchVRAMTotal != 6*gib || d.VRAMFree != 14*gib+d.TorchVRAMFree {
		t.Fatalf("system_stats %+v, want the card's 24 GiB with 14 GiB free plus PyTorch's idle reserve", d)
	}
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "history "+id) >= 0 }) {
		t.Fatal("the job never ended")
	}
	if gpu.Used() != 6*gib || gpu.Users("comfy") != 1 {
		t.Fatalf("used %d, users %d after the job, want its models' 6 GiB resident", gpu.Used(), gpu.Users("comfy"))
	}
	post(t, srv.URL+"/free", `{"unload_models":true,"free_memory":true}`)
	if !gpu.WaitFor(10*time.Second, func([]gputest.Event) bool { return gpu.Users("comfy") == 0 }) || gpu.Used() != 0 {
		t.Fatalf("used %d after the free", gpu.Used())
	}
	if len(gpu.OverCommits()) != 0 || srv.Reserved() != 0 {
		t.Fatalf("over-commits %v, reserved %d", gpu.OverCommits(), srv.Reserved())
	}
}

// By default nothing is charged, and the reserved memory reported is as
// before.
func TestNoBytesByDefault(t *testing.T) {
	srv, gpu := newFake(t, comfytest.Options{})
	_, body, _ := post(t, srv.URL+"/prompt", prompt("", "1", 10))
	id := promptID(t, body)
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "history "+id) >= 0 }) {
		t.Fatal("the job never ended")
	}
	if gpu.Used() != 0 || srv.Reserved() != 8*gib {
		t.Fatalf("used %d reserved %d", gpu.Used(), srv.Reserved())
	}
}

// A restart gives back the running job's memory and its models'.
func TestRestartGivesBackJobMemory(t *testing.T) {
	gpu := gputest.New()
	srv := comfytest.NewServer(gpu, comfytest.Options{ModelBytes: 2 * gib, JobBytes: 3 * gib})
	t.Cleanup(srv.Close)
	_, body, _ := post(t, srv.URL+"/prompt", prompt("", "1", 5000))
	id := promptID(t, body)
	gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "working memory of "+id) >= 0 })
	srv.Restart()
	if gpu.Used() != 0 || gpu.Users("comfy") != 0 {
		t.Fatalf("used %d users %d after the restart", gpu.Used(), gpu.Users("comfy"))
	}
}
