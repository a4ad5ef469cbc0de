package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// The shorthands' URLs are top-level fields named after their options,
// written first, and read back; a wrong value names its field.
func TestShorthandsJSON(t *testing.T) {
	in := `{"ollama":"http://127.0.0.1:11435","comfy":"http://127.0.0.1:8189","llm_busy_mode":"reject"}`
	var s Settings
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if s.Shorthand(LLM) != "http://127.0.0.1:11435" || s.Shorthand(Image) != "http://127.0.0.1:8189" || s.LLMBusyMode != "reject" {
		t.Fatalf("decoded %+v", s)
	}
	out, err := json.Marshal(s)
	if err != nil || string(out) != in {
		t.Fatalf("encoded %s %v, want %s", out, err, in)
	}
	if out, _ := json.Marshal(Settings{Shorthands: map[string]string{"ollama": "u"}}); string(out) != `{"ollama":"u"}` {
		t.Errorf("only a shorthand: %s", out)
	}
	for src, want := range map[string]string{
		`{"ollama":1}`:         "ollama: ",
		`{"ollama":"u","x":1}`: `unknown field "x"`,
	} {
		var s Settings
		if err := json.Unmarshal([]byte(src), &s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}
