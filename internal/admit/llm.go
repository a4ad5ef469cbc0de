package admit

import (
	"net/http"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// LLMBody is an LLM request's body as gpu.ServeLLM reads it: into memory
// within Budget and Limits, for the request answered through W.
type LLMBody struct {
	Budget *Budget
	Limits Limits
	W      http.ResponseWriter
	R      *http.Request

	ticket *Ticket // once admitted
}

// Admit implements gpu.Body (Budget.Admit).
func (b *LLMBody) Admit(deadline time.Time) (gpu.Ticket, error) {
	t, err := b.Budget.Admit(b.W, b.R, b.Limits, deadline)
	if err != nil {
		return nil, err
	}
	b.ticket = t
	return llmTicket{t: t, r: b.R}, nil
}

// Whole is the body as read for the wait (Ticket.Whole): nil before
// Admit, or if it was not read to its end.
func (b *LLMBody) Whole() []byte { return b.ticket.Whole() }

// llmTicket is an LLM request's Ticket as gpu.ServeLLM holds it.
type llmTicket struct {
	t *Ticket
	r *http.Request
}

func (l llmTicket) Waiter() gpu.Waiter { return l.t.Waiter(l.r, true) }
func (l llmTicket) StopWaiting()       { l.t.StopWaiting() }
func (l llmTicket) Done()              { l.t.Done() }

var _ gpu.Body = (*LLMBody)(nil)
