package kindstest

import (
	"testing"

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
