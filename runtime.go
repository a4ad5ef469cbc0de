package turnstile

import (
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
)

// turnstiles holds one runtime per turnstile name, process-wide. Each
// config generation takes a reference in Provision and drops it in
// Cleanup, so a reload (which provisions the new config before cleaning up
// the old) keeps the same lock, the same running job and the same holds.
var turnstiles = caddy.NewUsagePool()

// turnstile is the runtime of one named turnstile: the orchestration of
// its GPU (package gpu), the settings of the config now running, and what
// its waiting requests buffer. It outlives any one config.
type turnstile struct {
	// gpu is the orchestration this runtime owns, held as the concrete
	// type so that the fast path's TryLLM and ReleaseLLM inline.
	gpu     *gpu.GPU
	name    string
	metrics *metrics.Turnstile

	cfgp atomic.Pointer[config]
	logp atomic.Pointer[zap.Logger]

	budget admit.Budget // what waiting requests hold
}

func newTurnstile(name string) *turnstile {
	m := metrics.New(name)
	ts := &turnstile{gpu: gpu.New(name, m), name: name, metrics: m}
	ts.logp.Store(zap.NewNop())
	ts.gpu.SetStatusView(func(g gpu.Status) any { return ts.statusOf(g) })
	return ts
}

// Destruct implements caddy.Destructor: the last config using this
// turnstile is gone (Caddy stops). Job watches and holds end, which
// releases the lock, and it returns once every goroutine the turnstile
// started has returned.
func (ts *turnstile) Destruct() error {
	ts.gpu.Close()
	return nil
}

func (ts *turnstile) cfg() *config     { return ts.cfgp.Load() }
func (ts *turnstile) log() *zap.Logger { return ts.logp.Load() }

// apply makes a started config's settings current. It runs in the app's
// Start, so a config that fails to load changes nothing.
func (ts *turnstile) apply(c *config, log *zap.Logger) {
	ts.cfgp.Store(c)
	ts.logp.Store(log)
	ts.gpu.Apply(&c.GPU, log)
}

// Interface guards
var (
	_ caddy.Destructor = (*turnstile)(nil)
	_ httpapi.GPU      = (*gpu.GPU)(nil)
)
