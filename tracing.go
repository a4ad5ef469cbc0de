package turnstile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// The spans of a request that Caddy's tracing directive traces: the steps
// that take time get child spans (internal/gpu/trace.go has those of the
// GPU's side). The LLM fast path neither has one nor looks for one: it
// waits for nothing, and costs the same traced or not.

// startLLMWait starts the span of an LLM request's wait for the GPU. The
// model its buffered body names is an attribute; nothing else of the
// body is kept.
func (ts *turnstile) startLLMWait(r *http.Request, body *waitBody) trace.Span {
	if !trace.SpanFromContext(r.Context()).IsRecording() {
		return noop.Span{}
	}
	attrs := []attribute.KeyValue{gpu.AttrTurnstile.String(ts.name), gpu.AttrKind.String("llm")}
	if m := requestModel(body); m != "" {
		attrs = append(attrs, gpu.AttrModel.String(m))
	}
	_, span := gpu.StartSpan(r.Context(), "gpu_turnstile.wait", attrs...)
	return span
}

// maxModelName bounds the model name recorded from a request body.
const maxModelName = 256

// requestModel is the top-level "model" member of a buffered JSON body,
// "" if it has none there (or not within what was buffered).
func requestModel(wb *waitBody) string {
	if wb == nil {
		return ""
	}
	wb.mu.Lock()
	parts := make([]io.Reader, len(wb.chunks))
	for i, c := range wb.chunks {
		parts[i] = bytes.NewReader(c) // the chunks are never written to
	}
	wb.mu.Unlock()
	dec := json.NewDecoder(io.MultiReader(parts...))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "model" {
			var m string
			if dec.Decode(&m) != nil || len(m) > maxModelName {
				return ""
			}
			return m
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

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
