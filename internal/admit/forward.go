package admit

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/notice"
)

// LLMForward is an LLM request on gpu.ServeLLM's path: its body
// (LLMBody), its forward to Next (a gpu.Forwarder) and, with
// wait_notice, its notices, all in one allocation. A request admitted
// at once costs that, its body's buffer and its read's timer.
type LLMForward struct {
	LLMBody
	Next caddyhttp.Handler
	// Notice is the request's notices once they have started (nil if
	// they have not): everything is then written through its writer.
	Notice *notice.Wait

	outcome Outcome
}

// Out is where the request's answer is written: the notices' writer
// once they have started, else the client's.
func (f *LLMForward) Out() http.ResponseWriter {
	if f.Notice != nil {
		return f.Notice.Writer()
	}
	return f.W
}

// Forward implements gpu.Forwarder: the answer passes through, and with
// a (memory-aware admission) its status and an error's start are kept
// there even if Next panics.
func (f *LLMForward) Forward(a *gpu.Answered) error {
	if a == nil {
		return f.Next.ServeHTTP(f.Out(), f.R)
	}
	f.outcome = Outcome{ResponseWriter: f.Out()}
	defer func() { a.Status, a.Head = f.outcome.Result() }()
	return f.Next.ServeHTTP(&f.outcome, f.R)
}

var _ gpu.Forwarder = (*LLMForward)(nil)
