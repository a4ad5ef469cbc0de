package httpapi

import (
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// testTurnstile is a turnstile of a new GPU whose config has started,
// with no engines.
func testTurnstile(name string) Turnstile {
	return Turnstile{GPU: gpu.New(name, nopMetrics{}), Config: startedConfig{}}
}

// startedConfig is a running config with image_wait_timeout 10m.
type startedConfig struct{}

func (startedConfig) Facts() Facts                    { return Facts{} }
func (startedConfig) HoldWait() (time.Duration, bool) { return 10 * time.Minute, true }
func (startedConfig) RetryAfter() int                 { return 5 }

type nopMetrics struct{}

func (nopMetrics) Waited(lock.State, time.Duration)     {}
func (nopMetrics) Step(string, string, time.Duration)   {}
func (nopMetrics) UpstreamError(string, string, string) {}
func (nopMetrics) JobEnded(string, time.Duration)       {}
func (nopMetrics) HoldEvent(string)                     {}
func (nopMetrics) InterruptOverdue(string)              {}
func (nopMetrics) CoResident()                          {}

// orch is t's GPU, for what the routes do not use (Close, Apply).
func (t Turnstile) orch() *gpu.GPU { return t.GPU.(*gpu.GPU) }
