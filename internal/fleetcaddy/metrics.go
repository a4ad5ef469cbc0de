package fleetcaddy

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleet"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// picks counts the policy's picks: made once per process and registered
// into every config's registry, so that counts carry across reloads.
var picks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gpu_turnstile_fleet_picks_total",
	Help: "Hosts the gpu_turnstile selection policy picked, by upstream (its address), class (llm, image, passthrough) and why (ready: the model loaded or an idle host for an image job; room: a host with room loads the model; later: the earliest predicted start; unknown: a host of unknown state; pinned: the image client's host; fallback: the fallback policy chose; retry: a host already tried, the only one left).",
}, []string{"upstream", "class", "why"})

// registerPicks registers picks into reg (none: metrics are off).
func registerPicks(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	if err := reg.Register(picks); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
	}
	return nil
}

// upstreamPicks are one upstream's pick counters by class and why, each
// looked up once: a lookup by label values costs a pick more than the
// pick itself.
type upstreamPicks struct {
	dial     string
	counters [route.Image + 1][fleet.WhyRetry + 1]atomic.Pointer[prometheus.Counter]
}

// inc counts a pick of the upstream for a request of class c, decided by w.
func (p *upstreamPicks) inc(c route.Class, w fleet.Why) {
	slot := &p.counters[c][w]
	ctr := slot.Load()
	if ctr == nil {
		made := picks.WithLabelValues(p.dial, c.String(), w.String())
		ctr = &made
		slot.Store(ctr)
	}
	(*ctr).Inc()
}
