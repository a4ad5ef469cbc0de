package turnstile

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Caddy's tracing directive exports through autoexport, which picks the
// exporter OTEL_TRACES_EXPORTER names: this one keeps the spans in memory.
var testSpans = tracetest.NewInMemoryExporter()

func init() {
	autoexport.RegisterSpanExporter("gpu_turnstile_test", func(context.Context) (sdktrace.SpanExporter, error) {
		return testSpans, nil
	})
}

// traceSite is Caddy's tracing directive, naming each request's span
// after its method and path.
const traceSite = `tracing {
		span "{http.request.method} {http.request.uri.path}"
	}`

// traceToMemory has the next Caddy started trace to testSpans, exporting
// every few milliseconds.
func traceToMemory(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "gpu_turnstile_test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "5")
	testSpans.Reset()
}

// waitSpans waits until a span of each name has been exported (Caddy's
// exporter batches), and returns them all.
func waitSpans(t *testing.T, names ...string) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		spans := testSpans.GetSpans()
		missing := ""
		for _, n := range names {
			if spanNamed(spans, n) == nil {
				missing = n
				break
			}
		}
		if missing == "" {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q exported; got:\n%s", missing, dumpSpans(spans))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func spanNamed(spans tracetest.SpanStubs, name string) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func dumpSpans(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace %s parent %s links %d %v\n", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), len(s.Links), s.Attributes)
	}
	return b.String()
}

func attr(s *tracetest.SpanStub, key attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}

// checkAttrs fails unless s has each attribute of want.
func checkAttrs(t *testing.T, s *tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(s, k); got != v {
			t.Errorf("span %s: %s = %q, want %q; attributes %v", s.Name, k, got, v, s.Attributes)
		}
	}
}

// checkChild fails unless s is a child of parent.
func checkChild(t *testing.T, s, parent *tracetest.SpanStub) {
	t.Helper()
	if s.Parent.SpanID() != parent.SpanContext.SpanID() || s.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("span %s: parent %s in trace %s, want %s's span %s in trace %s", s.Name,
			s.Parent.SpanID(), s.SpanContext.TraceID(), parent.Name, parent.SpanContext.SpanID(), parent.SpanContext.TraceID())
	}
}

// checkLinked fails unless s is the root of a trace of its own, linked to
// from.
func checkLinked(t *testing.T, s, from *tracetest.SpanStub) {
	t.Helper()
	if s.Parent.IsValid() || s.SpanContext.TraceID() == from.SpanContext.TraceID() {
		t.Errorf("span %s: parent %s in trace %s, want the root of a trace of its own", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != from.SpanContext.SpanID() {
		t.Errorf("span %s: links %v, want one to %s's span %s", s.Name, s.Links, from.Name, from.SpanContext.SpanID())
	}
}

func hasEvent(s *tracetest.SpanStub, name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// inTrace is the spans of the trace id.
func inTrace(spans tracetest.SpanStubs, id trace.TraceID) []string {
	var names []string
	for _, s := range spans {
		if s.SpanContext.TraceID() == id {
			names = append(names, s.Name)
		}
	}
	return names
}

// TestTracingImageJobSpans follows an image job in Caddy's traces: its
// request's wait, unload and submit as child spans, and the job's watch,
// the free and the warm-up after it as traces of their own linked to the
// request's.
func TestTracingImageJobSpans(t *testing.T) {
	traceToMemory(t)
	h := newHarness(t, harnessOptions{settings: "warm_model llama3.2", comfy: comfyOpts(50 * time.Millisecond), site: traceSite})
	ctx := context.Background()
	h.waitIdle() // the start-up probe done
	// A model loaded, so that the unload has something to empty.
	const secret = "a prompt that is never recorded"
	if r := h.post(ctx, h.llm+"/api/generate", `{"model":"llama3.2","prompt":"`+secret+`","stream":false}`); r.status != 200 {
		t.Fatalf("generate: %d %s", r.status, r.body)
	}
	id := promptID(t, h.post(ctx, h.image+"/api/prompt", promptBody(50)))
	h.waitIdle()
	spans := waitSpans(t, "POST /api/generate", "POST /api/prompt",
		"gpu_turnstile.wait", "gpu_turnstile.unload", "gpu_turnstile.submit", "gpu_turnstile.job", "gpu_turnstile.free", "gpu_turnstile.warm")

	// The LLM request took the GPU at once: no span of the turnstile's.
	gen := spanNamed(spans, "POST /api/generate")
	if names := inTrace(spans, gen.SpanContext.TraceID()); len(names) != 1 {
		t.Errorf("the LLM request that did not wait has spans %v, want only its own", names)
	}

	req := spanNamed(spans, "POST /api/prompt")
	image := map[attribute.Key]string{gpu.AttrTurnstile: "default", gpu.AttrKind: "image"}
	children := map[string]*tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID() == req.SpanContext.TraceID() && s.Name != req.Name {
			children[s.Name] = &s
		}
	}
	if len(children) != 3 {
		t.Errorf("the image request's trace has %v, want its wait, unload and submit", inTrace(spans, req.SpanContext.TraceID()))
	}
	for _, name := range []string{"gpu_turnstile.wait", "gpu_turnstile.unload", "gpu_turnstile.submit"} {
		s := children[name]
		if s == nil {
			t.Fatalf("no %s span in the image request's trace", name)
		}
		checkChild(t, s, req)
		checkAttrs(t, s, image)
		checkAttrs(t, s, map[attribute.Key]string{gpu.AttrEngine: "comfyui"})
	}
	checkAttrs(t, children["gpu_turnstile.submit"], map[attribute.Key]string{gpu.AttrPromptID: id})
	if unload := children["gpu_turnstile.unload"]; !hasEvent(unload, "emptied") {
		t.Errorf("unload span: events %v, want Ollama emptied", unload.Events)
	}

	job := spanNamed(spans, "gpu_turnstile.job")
	checkLinked(t, job, req)
	checkAttrs(t, job, image)
	checkAttrs(t, job, map[attribute.Key]string{gpu.AttrPromptID: id, gpu.AttrEngine: "comfyui", gpu.AttrOutcome: "success"})

	free := spanNamed(spans, "gpu_turnstile.free")
	checkLinked(t, free, req)
	checkAttrs(t, free, map[attribute.Key]string{gpu.AttrPromptID: id})
	if !hasEvent(free, "freed") {
		t.Errorf("free span: events %v, want ComfyUI freed", free.Events)
	}

	warm := spanNamed(spans, "gpu_turnstile.warm")
	checkLinked(t, warm, req)
	checkAttrs(t, warm, map[attribute.Key]string{gpu.AttrTurnstile: "default", gpu.AttrKind: "llm", gpu.AttrModel: "llama3.2", gpu.AttrEngine: "ollama"})

	for _, s := range spans {
		if s.Status.Code == codes.Error {
			t.Errorf("span %s: status %v, want no error", s.Name, s.Status)
		}
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %s records the prompt: %s", s.Name, a.Key)
			}
		}
	}
	t.Logf("the image request's spans and those linked to it:\n%s", waterfall(spans, req))
}

// waterfall draws the spans of req's trace and those linked to it, one a
// line, as bars on a common time axis, for the test's log.
func waterfall(spans tracetest.SpanStubs, req *tracetest.SpanStub) string {
	var shown []tracetest.SpanStub
	for _, s := range spans {
		linked := len(s.Links) > 0 && s.Links[0].SpanContext.SpanID() == req.SpanContext.SpanID()
		if s.SpanContext.TraceID() == req.SpanContext.TraceID() || linked {
			shown = append(shown, s)
		}
	}
	sort.Slice(shown, func(i, j int) bool { return shown[i].StartTime.Before(shown[j].StartTime) })
	start, end := shown[0].StartTime, shown[0].EndTime
	for _, s := range shown {
		end = maxTime(end, s.EndTime)
	}
	const width = 48
	scale := float64(width) / float64(end.Sub(start))
	var b strings.Builder
	for _, s := range shown {
		from := int(float64(s.StartTime.Sub(start)) * scale)
		n := max(1, int(float64(s.EndTime.Sub(s.StartTime))*scale))
		name := s.Name
		if s.SpanContext.TraceID() != req.SpanContext.TraceID() {
			name += " (linked)"
		} else if s.Name != req.Name {
			name = "  " + name
		}
		fmt.Fprintf(&b, "%-34s %s%s%s %v\n", name, strings.Repeat(" ", from), strings.Repeat("█", n),
			strings.Repeat(" ", max(0, width-from-n)), s.EndTime.Sub(s.StartTime).Round(100*time.Microsecond))
	}
	return b.String()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestTracingLLMWaitSpan: an LLM request that waits for the GPU gets a
// span for the wait, with the model its body names; a wait that times out
// is the span's error.
func TestTracingLLMWaitSpan(t *testing.T) {
	cases := []struct {
		name     string
		settings string
		status   int
		code     codes.Code
	}{
		{"served after the hold", "", http.StatusOK, codes.Unset},
		{"times out", "llm_wait_timeout 100ms", http.StatusServiceUnavailable, codes.Error},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			traceToMemory(t)
			h := newHarness(t, harnessOptions{settings: tc.settings, site: traceSite})
			hold := h.takeHold(t, "test", "1m") // through the admin API, not traced
			res := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("qwen3:8b", false))
			if tc.status == http.StatusOK {
				h.waitStatus("LLM waiting", func(st Status) bool { return st.LLMWaiting == 1 })
				h.releaseHold(t, hold)
			}
			if r := <-res; r.status != tc.status {
				t.Fatalf("chat: %d %s, want %d", r.status, r.body, tc.status)
			}
			spans := waitSpans(t, "POST /api/chat", "gpu_turnstile.wait")
			req, wait := spanNamed(spans, "POST /api/chat"), spanNamed(spans, "gpu_turnstile.wait")
			checkChild(t, wait, req)
			checkAttrs(t, wait, map[attribute.Key]string{gpu.AttrTurnstile: "default", gpu.AttrKind: "llm", gpu.AttrModel: "qwen3:8b"})
			if wait.Status.Code != tc.code {
				t.Errorf("wait span: status %v, want %v", wait.Status, tc.code)
			}
			if tc.status != http.StatusOK {
				h.releaseHold(t, hold)
			}
			h.waitIdle()
		})
	}
}

// TestTracingSynchronousJobSpans: an A1111 job's submit is the job, and
// the wait for the engine to be idle after the answer, and the free, are
// linked to the request's span.
func TestTracingSynchronousJobSpans(t *testing.T) {
	traceToMemory(t)
	m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"}, site: traceSite})
	m.waitIdle()
	m.runImageJob(t, "a1111")
	m.waitIdle()
	spans := waitSpans(t, "POST /sdapi/v1/txt2img", "gpu_turnstile.submit", "gpu_turnstile.job", "gpu_turnstile.free")
	req := spanNamed(spans, "POST /sdapi/v1/txt2img")
	submit := spanNamed(spans, "gpu_turnstile.submit")
	checkChild(t, submit, req)
	checkAttrs(t, submit, map[attribute.Key]string{gpu.AttrKind: "image", gpu.AttrEngine: "a1111", gpu.AttrOutcome: "success"})
	for _, name := range []string{"gpu_turnstile.job", "gpu_turnstile.free"} {
		s := spanNamed(spans, name)
		checkLinked(t, s, req)
		checkAttrs(t, s, map[attribute.Key]string{gpu.AttrKind: "image", gpu.AttrEngine: "a1111"})
	}
}

// TestTracingRejectedPromptIsTheSubmitsError: a prompt the engine refuses
// queues no job: its submit span has the error, and no job span follows.
func TestTracingRejectedPromptIsTheSubmitsError(t *testing.T) {
	traceToMemory(t)
	h := newHarness(t, harnessOptions{site: traceSite})
	h.waitIdle()
	r := h.post(context.Background(), h.image+"/prompt", `{"prompt":{"1":{"class_type":"ImageBlur","inputs":{"blur_radius":40}},"9":{"class_type":"PreviewImage"}}}`)
	if r.status != http.StatusBadRequest {
		t.Fatalf("got %d %s, want ComfyUI's 400", r.status, r.body)
	}
	h.waitIdle()
	spans := waitSpans(t, "POST /prompt", "gpu_turnstile.submit")
	submit := spanNamed(spans, "gpu_turnstile.submit")
	checkChild(t, submit, spanNamed(spans, "POST /prompt"))
	if submit.Status.Code != codes.Error || !strings.Contains(submit.Status.Description, "400") {
		t.Errorf("submit span: status %v, want the engine's 400 as its error", submit.Status)
	}
	if spanNamed(spans, "gpu_turnstile.job") != nil {
		t.Error("a job span for a prompt that queued nothing")
	}
}
