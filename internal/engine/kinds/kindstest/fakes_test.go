package kindstest

import (
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Every kind of the registry has a fake, and only those: it starts, with
// the routes of its class.
func TestEveryKindHasAFake(t *testing.T) {
	if len(Fakes) != len(kinds.All) {
		t.Errorf("%d fakes for %d kinds", len(Fakes), len(kinds.All))
	}
	for _, k := range kinds.All {
		f, ok := Start(k.Name, gputest.New(), nil)
		if !ok {
			t.Errorf("%s has no fake", k.Name)
			continue
		}
		f.Close()
		llm := f.ChatPath != "" && f.ChatModel != ""
		if f.URL == "" || f.Service == "" || llm != (k.Class == engine.ClassLLM) || (f.JobPath != "") == llm {
			t.Errorf("%s: fake %+v does not fit its class %s", k.Name, f, k.Class)
		}
	}
}

// Every fake takes the shared timings and describes itself enough for the
// benchmarks and the demo: the marks of its class and a request to send.
func TestEveryFakeDescribesItself(t *testing.T) {
	for _, k := range Kinds(engine.ClassLLM) {
		f, _ := Start(k.Name, gputest.New(), engine.FakeOptions{Load: time.Millisecond, Unload: time.Millisecond})
		f.Close()
		if m := f.Marks; m.Arrived == "" || m.Ended == "" || m.Resumed == "" {
			t.Errorf("%s: marks %+v lack Arrived, Ended or Resumed", k.Name, m)
		}
	}
	for _, k := range Kinds(engine.ClassImage) {
		f, _ := Start(k.Name, gputest.New(), engine.FakeOptions{Job: time.Millisecond, Unload: time.Millisecond})
		f.Close()
		if m := f.Marks; m.Arrived == "" || m.Ended == "" || m.Freed == "" {
			t.Errorf("%s: marks %+v lack Arrived, Ended or Freed", k.Name, m)
		}
		if f.JobBody == "" || f.Job() == "" {
			t.Errorf("%s: no job body", k.Name)
		}
	}
}
