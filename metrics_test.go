package turnstile

import (
	"context"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// scrape reads Caddy's admin /metrics and returns the value of one series.
func (h *harness) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := h.metricIfAny(t, series)
	if !ok {
		t.Fatalf("no series %s in /metrics", series)
	}
	return v
}

// metricIfAny is metric for a series that may not exist yet: a counter
// with labels appears at its first count (0 until then).
func (h *harness) metricIfAny(t *testing.T, series string) (float64, bool) {
	t.Helper()
	resp, err := h.client.Get(h.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(string(b))
	if m == nil {
		return 0, false
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v, true
}

func TestMetricsMoveAndSurviveReloads(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "llm_busy_mode reject", comfy: comfyOpts(20 * time.Millisecond)})
	ctx := context.Background()
	jobs := `gpu_turnstile_image_jobs_total{outcome="success",turnstile="default"}`
	rejects := `gpu_turnstile_busy_total{reason="reject",turnstile="default"}`
	waits := `gpu_turnstile_lock_wait_seconds_count{kind="llm",turnstile="default"}`
	jobs0, _ := h.metricIfAny(t, jobs) // none yet when this test runs first
	rejects0, waits0 := h.metric(t, rejects), h.metric(t, waits)

	promptID(t, h.post(ctx, h.image+"/prompt", promptBody(20)))
	h.waitIdle()
	h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	hold := h.takeHold(t, "x", "1m")
	if got := h.metric(t, `gpu_turnstile_state{turnstile="default"}`); got != 3 {
		t.Fatalf("state gauge %v during a hold, want 3", got)
	}
	h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)) // rejected
	h.releaseHold(t, hold)
	h.waitIdle()

	// Reload: the same collectors go into the new registry, values intact.
	h.load(h.caddyfile(harnessOptions{settings: "llm_busy_mode reject\nbusy_retry_after 5s"}))
	if got := h.metric(t, jobs) - jobs0; got != 1 {
		t.Fatalf("image jobs +%v after a reload, want +1", got)
	}
	if got := h.metric(t, rejects) - rejects0; got != 1 {
		t.Fatalf("rejects +%v, want +1", got)
	}
	if got := h.metric(t, waits) - waits0; got != 1 {
		t.Fatalf("LLM lock waits +%v, want +1", got)
	}
	if got := h.metric(t, `gpu_turnstile_state{turnstile="default"}`); got != 0 {
		t.Fatalf("state gauge %v when idle", got)
	}
	for _, s := range []string{`gpu_turnstile_unload_seconds_count{engine="ollama",turnstile="default"}`, `gpu_turnstile_free_seconds_count{engine="comfyui",turnstile="default"}`,
		`gpu_turnstile_holds_total{event="granted",turnstile="default"}`, `gpu_turnstile_llm_inflight{turnstile="default"}`,
		`gpu_turnstile_image_pending{turnstile="default"}`} {
		h.metric(t, s) // present
	}
}

func TestMetricsPassPromlint(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := registerMetrics(reg); err != nil {
		t.Fatalf("registering twice (a reload): %v", err)
	}
	// Give every vector a series so promlint sees them.
	metrics.New("lint").WaitLLM.Observe(0)
	metrics.ImageJobs.WithLabelValues("lint", "success").Add(0)
	metrics.JobSeconds.WithLabelValues("lint", "success").Observe(0)
	metrics.HoldEvents.WithLabelValues("lint", "granted").Add(0)
	metrics.UpstreamErrors.WithLabelValues("lint", "ollama", "ollama", "unload").Add(0)
	for _, step := range []string{"unload", "free", "wake", "warm"} {
		metrics.New("lint").Step(step, "lint", 0)
	}
	metrics.BusyAnswers.WithLabelValues("lint", "reject").Add(0)
	metrics.BusyAnswers.WithLabelValues("lint", "overload").Add(0)
	// A turnstile in the pool, so the gauges read at scrape time are there.
	if _, _, err := turnstiles.LoadOrNew("lint", func() (caddy.Destructor, error) { return newTurnstile("lint"), nil }); err != nil {
		t.Fatal(err)
	}
	defer turnstiles.Delete("lint")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "gpu_turnstile") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestMetricsThroughTheMetricsDirective(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cf := strings.Replace(h.caddyfile(harnessOptions{}), "\thandle /healthz {", "\thandle /metrics {\n\t\tmetrics\n\t}\n\thandle /healthz {", 1)
	h.load(cf)
	resp, err := h.client.Get(h.llm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `gpu_turnstile_state{turnstile="default"}`) {
		t.Fatalf("metrics directive: %d, lacks gpu_turnstile_state", resp.StatusCode)
	}
}
