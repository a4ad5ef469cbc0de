package gpu

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedRequest is a request's context with a span that records to rec,
// as Caddy's tracing directive gives the handler, and that span.
func tracedRequest(t *testing.T, sampler sdktrace.Sampler) (context.Context, trace.Span, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	return ctx, span, rec
}

func endedNamed(rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func TestHoldSpansWaitAndUnloadThenLinkTheWarmUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.WarmModel = "llama3.2" })
	f.loadModel(t, "llama3.2")
	ctx, req, rec := tracedRequest(t, sdktrace.AlwaysSample())
	h, err := f.g.TakeHold(ctx, "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req.End() // the request was answered; the hold goes on
	for _, name := range []string{"gpu_turnstile.wait", "gpu_turnstile.unload"} {
		s := endedNamed(rec, name)
		if s == nil {
			t.Fatalf("no %s span", name)
		}
		if s.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want the request's span", name, s.Parent().SpanID())
		}
		if kind := attrOf(s, AttrKind); kind != "hold" {
			t.Errorf("%s: kind %q, want hold", name, kind)
		}
	}
	h.End("released")
	// The hold's end gives the GPU back in the background: it is idle for
	// a moment before the warm-up starts, so wait for the warm-up's span.
	f.waitState(t, "the warm-up's span ended after the hold", func(st Status) bool {
		return st.State == "idle" && !st.Warming && endedNamed(rec, "gpu_turnstile.warm") != nil
	})
	warm := endedNamed(rec, "gpu_turnstile.warm")
	if warm.Parent().IsValid() || len(warm.Links()) != 1 || warm.Links()[0].SpanContext.SpanID() != req.SpanContext().SpanID() {
		t.Errorf("warm-up span: parent %s links %v, want a new trace linked to the request's span", warm.Parent().SpanID(), warm.Links())
	}
}

func TestUnloadSpanRecordsTheFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.UnloadTimeout = 300 * time.Millisecond })
	f.loadModel(t, "llama3.2")
	f.ollama.SetUnloadStuck(true)
	ctx, req, rec := tracedRequest(t, sdktrace.AlwaysSample())
	defer req.End()
	job, err := f.g.BeginImage(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if job.Prepare() == nil {
		t.Fatal("Prepare succeeded with an Ollama that does not unload")
	}
	unload := endedNamed(rec, "gpu_turnstile.unload")
	if unload == nil || unload.Status().Code != codes.Error {
		t.Fatalf("unload span %v, want one with an error status", unload)
	}
	var engineErr bool
	for _, e := range unload.Events() {
		for _, a := range e.Attributes {
			engineErr = engineErr || e.Name == "exception" && a.Key == AttrEngine && a.Value.AsString() == "ollama"
		}
	}
	if !engineErr {
		t.Errorf("unload span events %v, want Ollama's error", unload.Events())
	}
}

// unsampledRequest samples every span but the request's, so that any
// span the turnstile started for it would be seen.
type unsampledRequest struct{}

func (unsampledRequest) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == "request" {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (unsampledRequest) Description() string { return "all but the request" }

// A request that is traced but not sampled gets no span of the
// turnstile's.
func TestUnsampledRequestGetsNoSpan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.WarmModel = "llama3.2" })
	ctx, req, rec := tracedRequest(t, unsampledRequest{})
	defer req.End()
	job, err := f.g.BeginImage(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	job.End("rejected")
	f.waitState(t, "idle after the warm-up", func(st Status) bool { return st.State == "idle" && !st.Warming })
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans started for a request that is not sampled", n)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}
