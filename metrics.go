package turnstile

import (
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// The series are internal/metrics'; the gauges below are read from the
// turnstiles at scrape time, which keeps them off the request path.
var (
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

var collectors = append(slices.Clone(metrics.Collectors), stateCollector{})

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
