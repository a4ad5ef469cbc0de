package admit

import (
	"net/http"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// LLMBody is an LLM request's body as gpu.ServeLLM reads it: into memory
// within Budget and Limits, for the request answered through W. Once
// admitted it is its own gpu.Ticket, so that the request's place, body
// and reading take one allocation, the LLMBody's.
type LLMBody struct {
	Budget *Budget
	Limits Limits
	W      http.ResponseWriter
	R      *http.Request

	ticket Ticket // once admitted
}

// Admit implements gpu.Body (Budget.Admit).
func (b *LLMBody) Admit(deadline time.Time) (gpu.Ticket, error) {
	if err := b.Budget.admit(&b.ticket, b.W, b.R, b.Limits, deadline); err != nil {
		return nil, err
	}
	return b, nil
}

// Whole is the body as read for the wait (Ticket.Whole): nil before
// Admit, or if it was not read to its end.
func (b *LLMBody) Whole() []byte { return b.ticket.Whole() }

// Waiter implements gpu.Ticket (Ticket.Waiter).
func (b *LLMBody) Waiter() gpu.Waiter { return b.ticket.Waiter(b.R, true) }

// StopWaiting implements gpu.Ticket.
func (b *LLMBody) StopWaiting() { b.ticket.StopWaiting() }

// Done implements gpu.Ticket.
func (b *LLMBody) Done() { b.ticket.Done() }

var (
	_ gpu.Body   = (*LLMBody)(nil)
	_ gpu.Ticket = (*LLMBody)(nil)
)
