package turnstile

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// tracingCases are the ways a request reaches the middleware: with no
// tracing directive, traced but not sampled, and traced, its span
// exported (to nowhere) as Caddy's provider would.
func tracingCases(tb testing.TB) []struct {
	name string
	tp   *sdktrace.TracerProvider // nil: no span
} {
	tp := func(s sdktrace.Sampler) *sdktrace.TracerProvider {
		p := sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		tb.Cleanup(func() { p.Shutdown(context.Background()) })
		return p
	}
	return []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{{"off", nil}, {"unsampled", tp(sdktrace.NeverSample())}, {"on", tp(sdktrace.AlwaysSample())}}
}

// BenchmarkHandlerLLMTracing is BenchmarkHandlerLLM under each tracing
// case. With tracing on, each request has a span of its own, started and
// ended as Caddy's tracing directive would around the middleware; "span
// alone" is that span's cost without the middleware.
func BenchmarkHandlerLLMTracing(b *testing.B) {
	for _, tc := range tracingCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			h := benchHandler(b)
			h.ts.gpu.TryLLM()
			r := benchRequest("POST", "/api/chat")
			vars := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
			fresh := tc.tp != nil && tc.name == "on"
			if tc.tp != nil && !fresh {
				// An unsampled span records nothing: one serves every request.
				ctx, span := tc.tp.Tracer("bench").Start(r.Context(), "handler")
				defer span.End()
				r = r.WithContext(ctx)
			}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				delete(vars, handledVar)
				if !fresh {
					h.ServeHTTP(w, r, nopNext)
					continue
				}
				ctx, span := tc.tp.Tracer("bench").Start(r.Context(), "handler")
				h.ServeHTTP(w, r.WithContext(ctx), nopNext)
				span.End()
			}
		})
	}
	tp := tracingCases(b)[2].tp
	b.Run("span alone", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_, span := tp.Tracer("bench").Start(ctx, "handler")
			span.End()
		}
	})
}

// TestLLMFastPathUntracedDoesNotAllocate: a request that is not traced,
// or traced but not sampled, costs the fast path no allocation.
func TestLLMFastPathUntracedDoesNotAllocate(t *testing.T) {
	h := llmInUseHandler("alloc-trace")
	for _, tc := range tracingCases(t)[:2] {
		r := benchRequest("POST", "/api/chat")
		if tc.tp != nil {
			ctx, span := tc.tp.Tracer("test").Start(r.Context(), "handler")
			defer span.End()
			r = r.WithContext(ctx)
		}
		if n := allocsPerRequest(h, r); n != 0 {
			t.Errorf("tracing %s: %v allocations per LLM request on the fast path", tc.name, n)
		}
	}
}
