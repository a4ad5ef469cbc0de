package config

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"

	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// docs/configuration.md documents every option the parsers know: a table
// row for each option of the global block and each subdirective of the
// gpu_turnstile directive, and every JSON field of the settings (those of
// the hold_while conditions included), so no option is added unseen.
func TestDocsListEveryOption(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	options := slices.Collect(maps.Keys(durationSettings(&Settings{})))
	options = slices.AppendSeq(options, maps.Keys(settingParsers))
	options = append(options, kinds.Shorthands()...)
	options = slices.AppendSeq(options, maps.Keys(handlerOptions(HandlerFields{})))
	slices.Sort(options)
	for _, o := range options {
		if !strings.Contains(doc, "| `"+o+"` |") {
			t.Errorf("docs/configuration.md has no table row for option %s", o)
		}
	}
	fields := map[string]reflect.Value{}
	collectFields(reflect.ValueOf(&Settings{}).Elem(), fields)
	collectFields(reflect.ValueOf(&EngineSettings{}).Elem(), fields)
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if !strings.Contains(doc, `"`+f+`"`) {
			t.Errorf("docs/configuration.md does not name the JSON field %q", f)
		}
	}
}
