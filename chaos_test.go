package turnstile

import (
	"context"
	"flag"
	"fmt"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/goleak"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 2*time.Second, "how long each seed of TestChaos runs")
	chaosSeeds    = flag.Int("chaos.seeds", 3, "how many seeds TestChaos runs")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "run TestChaos with this one seed (to reproduce a failure)")
)

// TestChaos drives a real Caddy with a random mix of LLM requests, image
// jobs, invalid prompts, holds, large bodies (with and without
// Content-Length) against a small wait_buffer_limit, client cancellations
// at every stage, upstream faults and config reloads, then checks that the
// GPU was never shared, every request was answered, the bytes buffered for
// waiting requests never passed the limit and all came back, the
// turnstile ends idle and nothing of ours is left running. Each run prints its seed; -chaos.seed=N
// replays it.
func TestChaos(t *testing.T) {
	seeds := []uint64{*chaosSeed}
	if *chaosSeed == 0 {
		seeds = nil
		base := uint64(time.Now().UnixNano())
		for i := range *chaosSeeds {
			seeds = append(seeds, base+uint64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runChaos(t, seed, *chaosDuration) })
	}
}

type chaosStats struct {
	requests, llm, images, invalid, holds, large, cancels, faults, reloads, failedReloads atomic.Int64
	byStatus                                                                              sync.Map // int -> *atomic.Int64
}

func (s *chaosStats) status(code int) {
	v, _ := s.byStatus.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func runChaos(t *testing.T, seed uint64, duration time.Duration) {
	t.Logf("seed %d (replay: go test -run TestChaos -chaos.seed=%d)", seed, seed)
	before := goleak.IgnoreCurrent()
	const waitBufferLimit = 2 << 20
	settings := "llm_wait_timeout 3s\nunload_timeout 300ms\njob_timeout 2s\nfree_timeout 500ms\nwarm_model llama3.2\nwarm_timeout 1s\nwait_buffer_limit 2MiB"
	h := newHarness(t, harnessOptions{
		settings: settings,
		ollama:   ollamatest.Options{LoadDelay: 5 * time.Millisecond, UnloadDelay: 5 * time.Millisecond, Tokens: 4, TokenDelay: time.Millisecond},
		comfy:    comfytest.Options{JobDuration: 20 * time.Millisecond, FreeDelay: 5 * time.Millisecond},
	})
	h.waitIdle()
	overload0 := counterValue(t, metrics.BusyAnswers.WithLabelValues(defaultName, "overload"))
	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var st chaosStats
	var hung atomic.Int64
	var wg sync.WaitGroup

	// Clients.
	for w := range 10 {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				chaosRequest(t, h, rng, &st, &hung)
			}
		}()
	}
	// Faults and reloads.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1000))
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond):
			}
			switch rng.IntN(7) {
			case 0:
				h.comfy.Restart()
			case 1:
				h.comfy.DropSockets()
			case 2:
				h.ollama.SetPSStatus(http.StatusInternalServerError)
				time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
				h.ollama.SetPSStatus(0)
			case 3:
				h.ollama.SetUnloadStuck(true)
				time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
				h.ollama.SetUnloadStuck(false)
			case 4, 5:
				mode := []string{"wait", "reject"}[rng.IntN(2)]
				streak := rng.IntN(3)
				extra := fmt.Sprintf("\nllm_busy_mode %s\nmax_image_streak %d", mode, streak)
				if rng.IntN(2) == 0 {
					extra += fmt.Sprintf("\nmax_waiting %d", 3+rng.IntN(8))
				}
				cf := h.caddyfile(harnessOptions{settings: settings + extra})
				if err := loadCaddyfile(cf); err != nil {
					t.Errorf("reload: %v", err)
				}
				st.reloads.Add(1)
				continue
			case 6:
				if loadCaddyfile(strings.Replace(h.caddyfile(harnessOptions{}), "unload_poll_interval 20ms", "unload_poll_interval never", 1)) == nil {
					t.Error("an invalid reload was accepted")
				}
				st.failedReloads.Add(1)
				continue
			}
			st.faults.Add(1)
		}
	}()
	wg.Wait()
	h.ollama.SetPSStatus(0)
	h.ollama.SetUnloadStuck(false)

	// The turnstile must come back to idle with every counter at zero.
	final := h.waitStatus("idle with zero counters after the run", func(s Status) bool {
		return s.State == "idle" && s.LLMInflight == 0 && s.LLMWaiting == 0 && s.ImageWaiting == 0 &&
			s.HoldWaiting == 0 && len(s.Holds) == 0 && !s.Warming && !s.Freeing && s.Job == nil &&
			s.WaitBuffer.Bytes == 0 && h.ts().budget.Waiting() == 0
	})
	if peak := final.WaitBuffer.Peak; peak > waitBufferLimit {
		t.Errorf("waiting requests held %d bytes of bodies at once, over wait_buffer_limit %d", peak, waitBufferLimit)
	}
	if n := hung.Load(); n > 0 {
		t.Errorf("%d requests were not answered within their deadline", n)
	}
	if o := h.gpu.Overlaps(); len(o) > 0 {
		t.Errorf("overlaps=%d: %v", len(o), o[:min(3, len(o))])
	}
	var codes []string
	st.byStatus.Range(func(k, v any) bool {
		codes = append(codes, fmt.Sprintf("%d:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("requests=%d llm=%d images=%d invalid=%d holds=%d large=%d cancels=%d faults=%d reloads=%d failed_reloads=%d statuses=%v overlaps=%d wait_buffer_peak=%d overload_answers=%v",
		st.requests.Load(), st.llm.Load(), st.images.Load(), st.invalid.Load(), st.holds.Load(), st.large.Load(), st.cancels.Load(),
		st.faults.Load(), st.reloads.Load(), st.failedReloads.Load(), codes, len(h.gpu.Overlaps()),
		final.WaitBuffer.Peak, counterValue(t, metrics.BusyAnswers.WithLabelValues(defaultName, "overload"))-overload0)
	checkNoGoroutinesLeft(t, h, before)
}

// chaosRequest sends one random request, maybe cancelling it part-way.
func chaosRequest(t *testing.T, h *harness, rng *rand.Rand, st *chaosStats, hung *atomic.Int64) {
	// Every request must be answered well within this: LLM waits end at
	// llm_wait_timeout (3s), and nothing else waits long.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cancelled := false
	if rng.IntN(6) == 0 {
		cancelled = true
		st.cancels.Add(1)
		time.AfterFunc(time.Duration(rng.IntN(60))*time.Millisecond, cancel)
	}
	var r result
	switch k := rng.IntN(23); {
	case k < 4:
		st.llm.Add(1)
		r = h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", rng.IntN(2) == 0))
	case k < 6:
		st.llm.Add(1)
		r = h.post(ctx, h.llm+"/api/generate", `{"model":"qwen3:8b","prompt":"hi","stream":false}`)
	case k < 8:
		st.llm.Add(1)
		r = h.post(ctx, h.llm+"/api/embed", `{"model":"nomic-embed-text","input":"hi"}`)
	case k < 10:
		st.llm.Add(1)
		r = h.post(ctx, h.llm+"/v1/chat/completions", `{"model":"llama3.2","stream":true,"messages":[]}`)
	case k < 11:
		st.llm.Add(1)
		r = h.post(ctx, h.llm+"/v1/embeddings", `{"model":"nomic-embed-text","input":"hi"}`)
	case k < 15:
		st.images.Add(1)
		r = h.post(ctx, h.image+[]string{"/prompt", "/api/prompt"}[rng.IntN(2)], promptBody(5+rng.IntN(60)))
	case k < 16:
		st.invalid.Add(1)
		r = h.post(ctx, h.image+"/prompt", `{"prompt":{"1":{"class_type":"Invalid"}}}`)
	case k < 18:
		r = h.do(http.MethodGet, h.llm+"/api/tags", "")
	case k < 19:
		st.large.Add(1)
		r = h.post(ctx, h.llm+"/api/chat", bigChat(256<<10+rng.IntN(1<<20)))
	case k < 20:
		st.large.Add(1)
		r = h.postChunked(ctx, h.llm+"/v1/chat/completions", bigChat(256<<10+rng.IntN(1<<20)))
	case k < 21:
		st.large.Add(1)
		r = h.post(ctx, h.image+"/prompt", bigPrompt(256<<10+rng.IntN(1<<20)))
	default:
		st.holds.Add(1)
		r = h.post(ctx, h.admin+"/gpu_turnstile/holds", fmt.Sprintf(`{"owner":"chaos","ttl":"%dms"}`, 30+rng.IntN(150)))
		if r.status == http.StatusCreated && rng.IntN(2) == 0 {
			id := r.body[strings.Index(r.body, `"id":"`)+6:]
			id = id[:strings.IndexByte(id, '"')]
			h.do(http.MethodDelete, h.admin+"/gpu_turnstile/holds/"+id, "")
		}
	}
	st.requests.Add(1)
	if r.err != nil {
		if ctx.Err() == context.DeadlineExceeded && !cancelled {
			hung.Add(1)
			t.Errorf("request not answered within 15s: %v", r.err)
		}
		return
	}
	st.status(r.status)
}

// checkNoGoroutinesLeft stops Caddy, the fakes and the idle client
// connections, and fails if a goroutine that was not running at before is
// still there: Caddy's Stop returns only once the turnstile's Destruct
// has waited for every goroutine it started. Caddy's own process-wide
// workers are let be.
func checkNoGoroutinesLeft(t *testing.T, h *harness, before goleak.Option) {
	t.Helper()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	h.ollama.Close()
	if h.comfy != nil {
		h.comfy.Close()
	}
	h.client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	// Caddy's admin endpoint outlives a stopped config, and so does the
	// refresher of a storage lock file Caddy took. The servers of configs
	// replaced by reloads (and old admin servers) shut down gracefully in
	// the background: http.Server.Shutdown notices that its connections
	// are gone only at its next poll, up to 500ms later.
	if err := goleak.Find(before,
		goleak.IgnoreAnyFunction("github.com/caddyserver/caddy/v2.replaceLocalAdminServer.func2"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
		goleak.IgnoreAnyFunction("net/http.(*Server).Shutdown"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/caddy/v2/modules/caddyhttp.(*App).stop.func4")); err != nil {
		t.Fatalf("goroutines left after shutdown: %v", err)
	}
}

// TestShutdownDuringAJob stops Caddy while a job holds the GPU: the stop
// is prompt, and nothing of the turnstile keeps running.
func TestShutdownDuringAJob(t *testing.T) {
	before := goleak.IgnoreCurrent()
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitStatus("job running", func(st Status) bool { return st.Job != nil && st.Job.PromptID == id })
	h.takeHoldAsync()
	done := make(chan error, 1)
	go func() { done <- caddy.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("caddy.Stop did not return while a job held the GPU")
	}
	if ts := runtimeOf(defaultName); ts != nil {
		t.Fatal("the turnstile outlived the last config")
	}
	checkNoGoroutinesLeft(t, h, before)
	if o := h.gpu.Overlaps(); len(o) > 0 {
		t.Fatalf("GPU shared: %v\n%s", o, gputest.Dump(h.gpu.Events()))
	}
}

// takeHoldAsync queues a hold behind the running job, so shutdown also
// meets a waiter.
func (h *harness) takeHoldAsync() {
	go h.post(context.Background(), h.admin+"/gpu_turnstile/holds", `{"owner":"late","ttl":"1m"}`)
	h.waitStatus("hold waiting", func(st Status) bool { return st.HoldWaiting == 1 })
}
