// Package metrics holds the turnstile's Prometheus series, made once per
// process and registered into every config's registry (by the root, with
// the gauges it reads at scrape time), and Turnstile, one turnstile's
// series with their labels bound: the gpu.Metrics of its GPU.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// The collectors are made once per process and registered into every
// config's registry, so values carry across reloads. Gauges are read from
// the turnstiles at scrape time, which keeps them off the request path.
var (
	ImageJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_image_jobs_total",
		Help: "Image jobs that held the GPU, by how they ended (success, error, interrupted, lost, timeout, shutdown).",
	}, []string{"turnstile", "outcome"})

	LockWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_lock_wait_seconds",
		Help:    "Time requests waited for the GPU, by kind (llm, image, hold).",
		Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"turnstile", "kind"})

	UnloadSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_unload_seconds",
		Help:    "Time an LLM engine took to unload its models (or sleep) before exclusive use, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"turnstile", "engine"})

	FreeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_free_seconds",
		Help:    "Time an image engine took to free its memory after its work, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	}, []string{"turnstile", "engine"})

	WakeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_wake_seconds",
		Help:    "Time an LLM engine that was put to sleep took to wake before LLM use, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"turnstile", "engine"})

	WarmSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_warm_seconds",
		Help:    "Time the warm_model took to load after exclusive use, by engine.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120},
	}, []string{"turnstile", "engine"})

	JobSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_job_seconds",
		Help:    "Time image jobs held the GPU, from the prompt to the job's end, by outcome.",
		Buckets: []float64{1, 5, 10, 30, 60, 120, 300, 600, 900, 1800},
	}, []string{"turnstile", "outcome"})

	BusyAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_busy_total",
		Help: "Requests answered busy, by reason (reject: reject mode; timeout: llm_wait_timeout passed; overload: wait_buffer_limit or max_waiting reached, LLM and image requests; vram: too little free video memory for the model, vram_admission).",
	}, []string{"turnstile", "reason"})

	HoldEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_holds_total",
		Help: "External holds, by event (granted, released, expired, cancelled, busy, failed, shutdown, restored).",
	}, []string{"turnstile", "event"})

	UpstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_upstream_errors_total",
		Help: "Failed calls the turnstile made to an upstream, by upstream (an engine's kind, or vram), engine (its name) and operation.",
	}, []string{"turnstile", "upstream", "engine", "op"})

	Misrouted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_misrouted_total",
		Help: "Guarded requests that reverse_proxy sent to an upstream that is none of the turnstile's engines (checked for the first requests after a config load, then sampled).",
	}, []string{"turnstile"})

	CoResidentAdmitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_coresident_total",
		Help: "LLM requests admitted beside a running image job (co_resident), their model fitting next to the job's learned peak.",
	}, []string{"turnstile"})

	InterruptOverdue = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_interrupt_overdue_total",
		Help: "Interrupted image jobs (cancel, job_timeout) whose engine did not show their end within interrupt_grace; each keeps the GPU until it does, by engine.",
	}, []string{"turnstile", "engine"})
)

// Collectors are the series above, for a registry.
var Collectors = []prometheus.Collector{
	ImageJobs, LockWait, UnloadSeconds, FreeSeconds, WakeSeconds, WarmSeconds, JobSeconds,
	BusyAnswers, HoldEvents, UpstreamErrors, Misrouted, InterruptOverdue, CoResidentAdmitted,
}

// Turnstile holds one turnstile's series with their labels bound,
// so the request path observes without a label lookup. It is the
// gpu.Metrics of the turnstile's GPU.
type Turnstile struct {
	name                         string
	WaitLLM, waitImage, waitHold prometheus.Observer
	Misrouted                    prometheus.Counter
	UpstreamErrors               *prometheus.CounterVec
}

func New(name string) *Turnstile {
	for _, reason := range []string{"reject", "timeout", "overload", "vram"} {
		BusyAnswers.WithLabelValues(name, reason) // each series is there from the start, at 0
	}
	return &Turnstile{
		name:           name,
		WaitLLM:        LockWait.WithLabelValues(name, "llm"),
		waitImage:      LockWait.WithLabelValues(name, "image"),
		waitHold:       LockWait.WithLabelValues(name, "hold"),
		Misrouted:      Misrouted.WithLabelValues(name),
		UpstreamErrors: UpstreamErrors,
	}
}

// Waited implements gpu.Metrics.
func (m *Turnstile) Waited(kind lock.State, d time.Duration) {
	switch kind {
	case lock.Hold:
		m.waitHold.Observe(d.Seconds())
	case lock.LLM:
		m.WaitLLM.Observe(d.Seconds())
	default:
		m.waitImage.Observe(d.Seconds())
	}
}

// Busy counts a busy answer by its reason (httpapi.Busy*; "" for none).
func (m *Turnstile) Busy(reason string) {
	if reason != "" {
		BusyAnswers.WithLabelValues(m.name, reason).Inc()
	}
}

// steps are the per-engine step histograms, by step.
var steps = map[string]*prometheus.HistogramVec{
	"unload": UnloadSeconds, "free": FreeSeconds, "wake": WakeSeconds, "warm": WarmSeconds,
}

// Step implements gpu.Metrics.
func (m *Turnstile) Step(step, engine string, d time.Duration) {
	if h := steps[step]; h != nil {
		h.WithLabelValues(m.name, engine).Observe(d.Seconds())
	}
}

// UpstreamError implements gpu.Metrics.
func (m *Turnstile) UpstreamError(upstream, engine, op string) {
	m.UpstreamErrors.WithLabelValues(m.name, upstream, engine, op).Inc()
}

// JobEnded implements gpu.Metrics.
func (m *Turnstile) JobEnded(outcome string, d time.Duration) {
	ImageJobs.WithLabelValues(m.name, outcome).Inc()
	JobSeconds.WithLabelValues(m.name, outcome).Observe(d.Seconds())
}

// HoldEvent implements gpu.Metrics.
func (m *Turnstile) HoldEvent(event string) {
	HoldEvents.WithLabelValues(m.name, event).Inc()
}

// InterruptOverdue implements gpu.Metrics.
func (m *Turnstile) InterruptOverdue(engine string) {
	InterruptOverdue.WithLabelValues(m.name, engine).Inc()
}

// CoResident implements gpu.Metrics.
func (m *Turnstile) CoResident() {
	CoResidentAdmitted.WithLabelValues(m.name).Inc()
}

var _ gpu.Metrics = (*Turnstile)(nil)
