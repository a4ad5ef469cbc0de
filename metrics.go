package turnstile

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// The collectors are made once per process and registered into every
// config's registry, so values carry across reloads. Gauges are read from
// the turnstiles at scrape time, which keeps them off the request path.
var (
	imageJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_image_jobs_total",
		Help: "Image jobs that held the GPU, by how they ended (success, error, interrupted, lost, timeout, shutdown).",
	}, []string{"turnstile", "outcome"})

	lockWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_lock_wait_seconds",
		Help:    "Time requests waited for the GPU, by kind (llm, image, hold).",
		Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"turnstile", "kind"})

	unloadSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_unload_seconds",
		Help:    "Time an LLM engine took to unload its models (or sleep) before exclusive use, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"turnstile", "engine"})

	freeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_free_seconds",
		Help:    "Time an image engine took to free its memory after its work, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	}, []string{"turnstile", "engine"})

	wakeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_wake_seconds",
		Help:    "Time an LLM engine that was put to sleep took to wake before LLM use, by engine.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"turnstile", "engine"})

	warmSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_warm_seconds",
		Help:    "Time the warm_model took to load after exclusive use, by engine.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120},
	}, []string{"turnstile", "engine"})

	jobSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpu_turnstile_job_seconds",
		Help:    "Time image jobs held the GPU, from the prompt to the job's end, by outcome.",
		Buckets: []float64{1, 5, 10, 30, 60, 120, 300, 600, 900, 1800},
	}, []string{"turnstile", "outcome"})

	busyAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_busy_total",
		Help: "Requests answered busy, by reason (reject: reject mode; timeout: llm_wait_timeout passed; overload: wait_buffer_limit or max_waiting reached, LLM and image requests; vram: too little free video memory for the model, vram_admission).",
	}, []string{"turnstile", "reason"})

	holdEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_holds_total",
		Help: "External holds, by event (granted, released, expired, cancelled, busy, failed, shutdown, restored).",
	}, []string{"turnstile", "event"})

	upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_upstream_errors_total",
		Help: "Failed calls the turnstile made to an upstream, by upstream (an engine's kind, or vram), engine (its name) and operation.",
	}, []string{"turnstile", "upstream", "engine", "op"})

	misrouted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_misrouted_total",
		Help: "Guarded requests that reverse_proxy sent to an upstream that is none of the turnstile's engines (checked for the first requests after a config load, then sampled).",
	}, []string{"turnstile"})

	coResidentAdmitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_coresident_total",
		Help: "LLM requests admitted beside a running image job (co_resident), their model fitting next to the job's learned peak.",
	}, []string{"turnstile"})

	interruptOverdue = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpu_turnstile_interrupt_overdue_total",
		Help: "Interrupted image jobs (cancel, job_timeout) whose engine did not show their end within interrupt_grace; each keeps the GPU until it does, by engine.",
	}, []string{"turnstile", "engine"})

	stateDesc = prometheus.NewDesc("gpu_turnstile_state",
		"What the GPU is used for: 0 idle, 1 llm, 2 image, 3 hold.", []string{"turnstile"}, nil)
	inflightDesc = prometheus.NewDesc("gpu_turnstile_llm_inflight",
		"LLM requests holding the GPU.", []string{"turnstile"}, nil)
	pendingDesc = prometheus.NewDesc("gpu_turnstile_image_pending",
		"1 while an image job holds or waits for the GPU.", []string{"turnstile"}, nil)
	waitingDesc = prometheus.NewDesc("gpu_turnstile_waiting",
		"Requests waiting for the GPU, by kind (llm, image, hold).", []string{"turnstile", "kind"}, nil)
	holdsDesc = prometheus.NewDesc("gpu_turnstile_holds_active",
		"External holds that own the GPU now.", []string{"turnstile"}, nil)
	waitBufferDesc = prometheus.NewDesc("gpu_turnstile_wait_buffer_bytes",
		"Request body bytes held in memory for requests waiting for the GPU.", []string{"turnstile"}, nil)
	vramFreeDesc = prometheus.NewDesc("gpu_turnstile_vram_free_bytes",
		"The card's free video memory at the last reading (vram_admission).", []string{"turnstile"}, nil)
	waitBufferLimitDesc = prometheus.NewDesc("gpu_turnstile_wait_buffer_limit_bytes",
		"wait_buffer_limit: the most request body bytes waiting requests may hold.", []string{"turnstile"}, nil)
)

// stateCollector reports the live gauges of every turnstile at scrape time.
type stateCollector struct{}

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{stateDesc, inflightDesc, pendingDesc, waitingDesc, holdsDesc, waitBufferDesc, waitBufferLimitDesc, vramFreeDesc} {
		ch <- d
	}
}

func (stateCollector) Collect(ch chan<- prometheus.Metric) {
	turnstiles.Range(func(_, v any) bool {
		ts := v.(*turnstile)
		st := ts.status()
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{ts.name}, labels...)...)
		}
		gauge(stateDesc, float64(stateNumber(st.State)))
		gauge(inflightDesc, float64(st.LLMInflight))
		pending := 0.0
		if st.ImagePending {
			pending = 1
		}
		gauge(pendingDesc, pending)
		gauge(waitingDesc, float64(st.LLMWaiting), "llm")
		gauge(waitingDesc, float64(st.ImageWaiting), "image")
		gauge(waitingDesc, float64(st.HoldWaiting), "hold")
		gauge(holdsDesc, float64(len(st.Holds)))
		gauge(waitBufferDesc, float64(st.WaitBuffer.Bytes))
		gauge(waitBufferLimitDesc, float64(st.WaitBuffer.Limit))
		if st.VRAM != nil && st.VRAM.ReadAt != nil {
			gauge(vramFreeDesc, float64(st.VRAM.FreeBytes))
		}
		return true
	})
}

func stateNumber(s string) int {
	for _, st := range lock.States {
		if st.String() == s {
			return int(st)
		}
	}
	return -1
}

var collectors = []prometheus.Collector{
	imageJobs, lockWait, unloadSeconds, freeSeconds, wakeSeconds, warmSeconds, jobSeconds,
	busyAnswers, holdEvents, upstreamErrors, misrouted, interruptOverdue, coResidentAdmitted, stateCollector{},
}

// registerMetrics adds the collectors to a config's registry. The same
// collector already there is expected after a reload and is not an error.
func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// turnstileMetrics holds one turnstile's series with their labels bound,
// so the request path observes without a label lookup. It is the
// gpu.Metrics of the turnstile's GPU.
type turnstileMetrics struct {
	name                         string
	waitLLM, waitImage, waitHold prometheus.Observer
	misrouted                    prometheus.Counter
	upstreamErrors               *prometheus.CounterVec
}

func newTurnstileMetrics(name string) *turnstileMetrics {
	for _, reason := range []string{"reject", "timeout", "overload", "vram"} {
		busyAnswers.WithLabelValues(name, reason) // each series is there from the start, at 0
	}
	return &turnstileMetrics{
		name:           name,
		waitLLM:        lockWait.WithLabelValues(name, "llm"),
		waitImage:      lockWait.WithLabelValues(name, "image"),
		waitHold:       lockWait.WithLabelValues(name, "hold"),
		misrouted:      misrouted.WithLabelValues(name),
		upstreamErrors: upstreamErrors,
	}
}

// Waited implements gpu.Metrics.
func (m *turnstileMetrics) Waited(kind lock.State, d time.Duration) {
	switch kind {
	case lock.Hold:
		m.waitHold.Observe(d.Seconds())
	case lock.LLM:
		m.waitLLM.Observe(d.Seconds())
	default:
		m.waitImage.Observe(d.Seconds())
	}
}

// busy counts a busy answer by its reason (httpapi.Busy*; "" for none).
func (m *turnstileMetrics) busy(reason string) {
	if reason != "" {
		busyAnswers.WithLabelValues(m.name, reason).Inc()
	}
}

// steps are the per-engine step histograms, by step.
var steps = map[string]*prometheus.HistogramVec{
	"unload": unloadSeconds, "free": freeSeconds, "wake": wakeSeconds, "warm": warmSeconds,
}

// Step implements gpu.Metrics.
func (m *turnstileMetrics) Step(step, engine string, d time.Duration) {
	if h := steps[step]; h != nil {
		h.WithLabelValues(m.name, engine).Observe(d.Seconds())
	}
}

// UpstreamError implements gpu.Metrics.
func (m *turnstileMetrics) UpstreamError(upstream, engine, op string) {
	m.upstreamErrors.WithLabelValues(m.name, upstream, engine, op).Inc()
}

// JobEnded implements gpu.Metrics.
func (m *turnstileMetrics) JobEnded(outcome string, d time.Duration) {
	imageJobs.WithLabelValues(m.name, outcome).Inc()
	jobSeconds.WithLabelValues(m.name, outcome).Observe(d.Seconds())
}

// HoldEvent implements gpu.Metrics.
func (m *turnstileMetrics) HoldEvent(event string) {
	holdEvents.WithLabelValues(m.name, event).Inc()
}

// InterruptOverdue implements gpu.Metrics.
func (m *turnstileMetrics) InterruptOverdue(engine string) {
	interruptOverdue.WithLabelValues(m.name, engine).Inc()
}

// CoResident implements gpu.Metrics.
func (m *turnstileMetrics) CoResident() {
	coResidentAdmitted.WithLabelValues(m.name).Inc()
}

var _ gpu.Metrics = (*turnstileMetrics)(nil)
