package turnstile

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// The spans of a request that Caddy's tracing directive traces: the steps
// that take time get child spans (internal/gpu/trace.go has those of the
// GPU's side). The LLM fast path neither has one nor looks for one: it
// waits for nothing, and costs the same traced or not.

// startSubmit starts the span of an image job's forward to its engine,
// in a context that outlives the client as the forward does.
func (ts *turnstile) startSubmit(r *http.Request, e gpu.ImageEngine) (context.Context, trace.Span) {
	ctx := context.WithoutCancel(r.Context())
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}
	}
	return gpu.StartSpan(ctx, "gpu_turnstile.submit", gpu.AttrTurnstile.String(ts.name),
		gpu.AttrKind.String("image"), gpu.AttrEngine.String(e.Name()))
}

// endSubmit ends the span of a forward that queued a job as id, or did
// not: err, or the engine's answer (status) queued nothing.
func endSubmit(span trace.Span, e gpu.ImageEngine, queued bool, id string, status int, err error) {
	if span.IsRecording() {
		if queued {
			span.SetAttributes(gpu.AttrPromptID.String(id))
		} else if err == nil {
			err = fmt.Errorf("%s answered %d with no prompt_id: no job queued", e.Name(), status)
		}
	}
	gpu.EndSpan(span, err)
}

// endSyncSubmit ends the span of a synchronous job's forward, which ran
// the job: outcome is how it ended.
func endSyncSubmit(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(gpu.AttrOutcome.String(outcome))
		if err == nil && outcome != "success" {
			err = fmt.Errorf("image job %s", outcome)
		}
	}
	gpu.EndSpan(span, err)
}
