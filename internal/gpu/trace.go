package gpu

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing. When the request that starts a step carries a recording span
// (Caddy's tracing directive), the step gets a span of its own, reported
// through that span's tracer provider: a child while the request waits
// for the step, or, for work that goes on after the answer (a job's
// watch, the free after it, a warm-up), the root of a new trace linked to
// the request's span. Without a recording span nothing is started and
// nothing is allocated.

// TracerName is the instrumentation scope of the turnstile's spans.
const TracerName = "github.com/gpu-turnstile/caddy-gpu-turnstile"

// Span attribute keys.
const (
	AttrTurnstile = attribute.Key("gpu_turnstile.turnstile")
	AttrKind      = attribute.Key("gpu_turnstile.kind") // llm, image or hold
	AttrModel     = attribute.Key("gpu_turnstile.model")
	AttrPromptID  = attribute.Key("gpu_turnstile.prompt_id")
	AttrEngine    = attribute.Key("gpu_turnstile.engine")
	AttrOutcome   = attribute.Key("gpu_turnstile.outcome")
)

// StartSpan starts a child of the span in ctx if that one records, and
// otherwise returns ctx and a span that does nothing.
func StartSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noop.Span{}
	}
	return parent.TracerProvider().Tracer(TracerName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// EndSpan ends span, recording err, if not nil, as why the step failed.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// spanLink is the request span a use serves: its context, to be parent
// or link of the use's steps, and the tracer provider it reports to. The
// zero value is a request that is not traced.
type spanLink struct {
	tp trace.TracerProvider
	sc trace.SpanContext
}

func linkOf(ctx context.Context) spanLink {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return spanLink{}
	}
	return spanLink{tp: s.TracerProvider(), sc: s.SpanContext()}
}

// start starts a span under base (g.ctx, so that the step outlives the
// request): a child of the request's span, or with linked the root of a
// new trace linked to it, as the request may have been answered.
func (l spanLink) start(base context.Context, linked bool, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if l.tp == nil {
		return base, noop.Span{}
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...)}
	if linked {
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: l.sc}))
	} else {
		base = trace.ContextWithSpanContext(base, l.sc)
	}
	return l.tp.Tracer(TracerName).Start(base, name, opts...)
}

// traced is what the spans of a use's steps say about the request it
// serves, and where they go.
type traced struct {
	req spanLink
	// detached is set once the request has been answered and the use goes
	// on in the background: its steps are linked to the request's span.
	detached bool
	kind     string // "image" or "hold"
	engine   string // the image engine of a job
	promptID string
}

// start starts the span of one of the use's steps.
func (t *traced) start(g *GPU, name string) (context.Context, trace.Span) {
	if t.req.tp == nil {
		return g.ctx, noop.Span{}
	}
	return t.req.start(g.ctx, t.detached, name, t.attrs(g)...)
}

func (t *traced) attrs(g *GPU) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrTurnstile.String(g.name), AttrKind.String(t.kind)}
	if t.engine != "" {
		attrs = append(attrs, AttrEngine.String(t.engine))
	}
	if t.promptID != "" {
		attrs = append(attrs, AttrPromptID.String(t.promptID))
	}
	return attrs
}

// startWait starts the span of a wait for the GPU alone, for a request
// whose span is in ctx.
func (g *GPU) startWait(ctx context.Context, t *traced) trace.Span {
	if t.req.tp == nil {
		return noop.Span{}
	}
	_, span := StartSpan(ctx, "gpu_turnstile.wait", t.attrs(g)...)
	return span
}

// startLLMWait starts the span of an LLM request's wait for a shared
// place, with the model the request names (WithWaiter), if any.
func (g *GPU) startLLMWait(ctx context.Context) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return noop.Span{}
	}
	attrs := []attribute.KeyValue{AttrTurnstile.String(g.name), AttrKind.String("llm")}
	if m := waiterFrom(ctx).Model; m != "" {
		attrs = append(attrs, AttrModel.String(m))
	}
	_, span := StartSpan(ctx, "gpu_turnstile.wait", attrs...)
	return span
}

// startWarm starts the span of a warm-up, linked to the request's span
// whose use of the GPU it follows.
func (g *GPU) startWarm(from spanLink, model, engine string) (context.Context, trace.Span) {
	if from.tp == nil {
		return g.ctx, noop.Span{}
	}
	return from.start(g.ctx, true, "gpu_turnstile.warm",
		AttrTurnstile.String(g.name), AttrKind.String("llm"), AttrModel.String(model), AttrEngine.String(engine))
}

// endJobSpan ends the span of a job's watch with the job's outcome: one
// that did not run to its end (an error, a timeout, lost, Caddy stopping)
// is the span's error; an interrupt asked for is not.
func endJobSpan(span trace.Span, outcome string) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		switch outcome {
		case "success", "interrupted":
		default:
			span.SetStatus(codes.Error, "image job ended "+outcome)
		}
	}
	span.End()
}

// stepEvent records, on the span in ctx, one engine's part in a step (an
// LLM engine emptied, an image engine freed, one woken), or its failure.
func stepEvent(ctx context.Context, name, engine string, took time.Duration, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := trace.WithAttributes(AttrEngine.String(engine), attribute.Float64("gpu_turnstile.seconds", took.Seconds()))
	if err != nil {
		span.RecordError(err, attrs)
		return
	}
	span.AddEvent(name, attrs)
}

// startFree starts the span of the Free effect, in the trace of the use
// that is giving the GPU back (see GPU.releasing).
func (g *GPU) startFree() (context.Context, trace.Span) {
	g.mu.Lock()
	u := g.releasing
	g.releasing = nil
	g.mu.Unlock()
	if u == nil {
		return g.ctx, noop.Span{}
	}
	return u.tr.start(g, "gpu_turnstile.free")
}
