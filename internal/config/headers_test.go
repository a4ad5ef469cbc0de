package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// An engine's block takes `header NAME VALUE`, repeatable; a wrong one is
// an error at its line that does not echo the value.
func TestEngineHeaderCaddyfile(t *testing.T) {
	_, s, err := parse(t, "gpu_turnstile {\n\tllm llamaswap http://127.0.0.1:8080 {\n\t\theader Authorization \"Bearer {env.TEST_KEY}\"\n\t\theader X-Api-Key k2\n\t\theader X-Api-Key k3\n\t\tname swap\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	h := s.LLM[0].Headers
	if s.LLM[0].Name != "swap" || h.Get("Authorization") != "Bearer {env.TEST_KEY}" || len(h.Values("X-Api-Key")) != 2 {
		t.Fatalf("parsed %+v", s.LLM[0])
	}
	for _, tc := range []struct{ block, want string }{
		{"header Authorization", "want `header NAME VALUE`, at Testfile:3"},
		{"header \"\" v", "header: empty name, at Testfile:3"},
		{"header \"X Key\" v", `header "X Key": invalid name`},
		{"header X-Key \"\"", "header X-Key: empty value, at Testfile:3"},
		{"header X-Key a b c", "want `header NAME VALUE`"},
	} {
		src := "gpu_turnstile {\n\tllm llamaswap http://127.0.0.1:8080 {\n\t\t" + tc.block + "\n\t}\n}"
		_, _, err := parse(t, src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.block, err, tc.want)
		}
	}
}

// Placeholders are expanded when the settings are validated; a value
// that expands to nothing, or to a line break, is refused without being
// echoed.
func TestEngineHeaderExpanded(t *testing.T) {
	t.Setenv("TEST_KEY", "s3cret")
	h, err := engineHeader(map[string][]string{"authorization": {"Bearer {env.TEST_KEY}"}, "X-Other": {"{unknown}"}})
	if err != nil || h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Other") != "{unknown}" {
		t.Fatalf("%v, %v", h, err)
	}
	t.Setenv("TEST_KEY", "")
	if _, err := engineHeader(map[string][]string{"X-Api-Key": {"{env.TEST_KEY}"}}); err == nil || !strings.Contains(err.Error(), "empty value") {
		t.Fatalf("an unset variable: %v", err)
	}
	t.Setenv("TEST_KEY", "s3cret\r\nX-Evil: 1")
	_, err = engineHeader(map[string][]string{"X-Api-Key": {"{env.TEST_KEY}"}})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a line break: %v, want an error without the value", err)
	}
	_, err = Validate(Settings{LLM: []EngineSettings{{Kind: "vllm", URL: "http://127.0.0.1:2", Headers: map[string][]string{"X-Api-Key": {"{env.TEST_KEY}"}}}}})
	if err == nil || !strings.HasPrefix(err.Error(), "llm vllm: header X-Api-Key:") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Validate: %v", err)
	}
}

// The JSON field is headers, in http.Header's shape, decoded strictly.
func TestEngineHeaderJSON(t *testing.T) {
	var s Settings
	if err := json.Unmarshal([]byte(`{"llm":[{"kind":"vllm","url":"http://127.0.0.1:2","headers":{"Authorization":["Bearer k"]}}]}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.LLM[0].Headers.Get("Authorization") != "Bearer k" {
		t.Fatalf("decoded %+v", s.LLM[0])
	}
	if err := json.Unmarshal([]byte(`{"llm":[{"kind":"vllm","url":"http://127.0.0.1:2","headers":{"Authorization":"Bearer k"}}]}`), &s); err == nil {
		t.Fatal("a header's value as a string, not a list, was accepted")
	}
	if err := json.Unmarshal([]byte(`{"llm":[{"kind":"vllm","url":"http://127.0.0.1:2","header":{"Authorization":["Bearer k"]}}]}`), &s); err == nil {
		t.Fatal("an unknown field was accepted")
	}
}
