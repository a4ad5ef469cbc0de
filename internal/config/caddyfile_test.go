package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func parse(t *testing.T, src string, defined ...string) (string, *Settings, error) {
	t.Helper()
	return ParseGlobalOption(caddyfile.NewTestDispenser(src), func(name string) bool {
		for _, d := range defined {
			if d == name {
				return true
			}
		}
		return false
	})
}

// The global block gives a turnstile's name and settings; an error is at
// the line of the option it is about, even for a check across options.
func TestParseGlobalOption(t *testing.T) {
	name, s, err := parse(t, "gpu_turnstile gpu1 {\n\tollama http://127.0.0.1:11435\n\timage a1111 http://127.0.0.1:7860 {\n\t\tname forge\n\t}\n\thold_while process steam\n}")
	if err != nil || name != "gpu1" || s.Shorthands["ollama"] != "http://127.0.0.1:11435" || len(s.Image) != 1 || s.Image[0].Name != "forge" || s.HoldWhileProcess[0] != "steam" {
		t.Fatalf("parsed %q %+v, %v", name, s, err)
	}
	for _, tc := range []struct {
		src, want string
		defined   []string
	}{
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n}", `turnstile "default" is defined twice`, []string{"default"}},
		{"gpu_turnstile ../x {\n}", "invalid turnstile name", nil},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tjob_timeout 1m\n\tjob_timeout 2m\n}", "job_timeout: given twice, on lines 3 and 4", nil},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tllm vllm http://127.0.0.1:8000\n\tllm vllm http://127.0.0.1:8001\n}", "already named", nil},
		{"gpu_turnstile {\n\tcomfy http://127.0.0.1:8189\n\tllm vllm http://127.0.0.1:8000\n\twarm_model m\n}", "(ollama or llamacpp)", nil},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tllm bogus http://127.0.0.1:8000\n}", "want one of llamacpp, llamaswap, ollama, vllm", nil},
	} {
		_, _, err := parse(t, tc.src, tc.defined...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.src, err, tc.want)
		}
	}
	_, _, err = parse(t, "gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tllm vllm http://127.0.0.1:8000\n\tllm vllm http://127.0.0.1:8001\n}")
	if !strings.HasSuffix(err.Error(), ":4") {
		t.Errorf("the second vllm's error is not at line 4: %v", err)
	}
}

// Validate fills in the defaults and reports an engine's error as an
// *EngineError with its place among its class's engines.
func TestValidate(t *testing.T) {
	c, err := Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, WarmModel: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.BusyStatus != 503 || c.LLMWait != 10*time.Minute || c.ImageWait != 30*time.Minute || c.WaitBuffer != 256<<20 ||
		c.CaptureLimit != 64<<10 || c.GPU.WarmEngine == nil || c.GPU.PresencePoll != 2*time.Second || c.Routes == nil {
		t.Fatalf("defaults not filled in: %+v", c)
	}
	_, err = Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, LLM: []EngineSettings{{Kind: "vllm", URL: "http://127.0.0.1:2", Name: "a b"}}})
	var ee *EngineError
	if !errors.As(err, &ee) || ee.Class != LLM || ee.Index != 1 {
		t.Fatalf("%v: want the error of the second LLM engine", err)
	}
}
