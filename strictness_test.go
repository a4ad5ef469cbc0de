package turnstile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// A JSON config is refused where the Caddyfile refuses the same value, with
// the JSON field's name in the message.
func TestJSONGetsTheCaddyfileChecks(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"prompt_capture_limit", "2147483648"}, {"prompt_capture_limit", "10"},
		{"llm_busy_status", "200"}, {"llm_busy_mode", `"sometimes"`},
		{"interrupt_grace", "-1"}, {"job_timeout", "-1"}, {"vram_probe", `"rocm-smi"`},
	} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1","%s":%s}}}}}`, tc.field, tc.value)
		err := caddy.Load([]byte(cfg), true)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %s: %v, want an error naming %s", tc.field, tc.value, err, tc.field)
		}
	}
}

// `caddy adapt` looks nothing up on the host: vram_probe nvidia-smi adapts
// on a machine without the NVIDIA driver, and the executable is looked for
// when the config loads.
func TestAdaptDoesNotProbeTheHost(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no nvidia-smi anywhere
	src := `{
	admin off
	gpu_turnstile {
		ollama http://127.0.0.1:1
		min_free_vram 8GiB
		vram_probe nvidia-smi
	}
}`
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapt needs nvidia-smi: %v", err)
	}
	if err := caddy.Load(cfg, true); err == nil || !strings.Contains(err.Error(), "nvidia-smi not found") {
		t.Fatalf("load without nvidia-smi: %v, want an error saying it is not found", err)
	}
}

// A turnstile's name names its folder in Caddy's storage: JSON gets the
// Caddyfile's check, and "." or ".." is refused, as is a path.
func TestTurnstileNamesAreChecked(t *testing.T) {
	for _, name := range []string{"..", ".", "../../x", "a/b", ""} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{%q:{"ollama":"http://127.0.0.1:1"}}}}}`, name)
		if err := caddy.Load([]byte(cfg), true); err == nil || !strings.Contains(err.Error(), "turnstile name") {
			t.Errorf("turnstile %q: %v, want the name refused", name, err)
		}
	}
	src := "{\n\tgpu_turnstile .. {\n\t\tollama http://127.0.0.1:1\n\t}\n}\n"
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"}); err == nil {
		t.Error(`gpu_turnstile ".." adapts`)
	}
	caddy.Stop()
}

// An engine URL the client would build wrong URLs from is refused at
// adapt, naming the option and its line; so is an engine name outside
// the turnstile-name rule. JSON gets the same checks.
func TestEngineURLsAndNamesAreStrict(t *testing.T) {
	for _, tc := range []struct{ option, want string }{
		{"ollama http://127.0.0.1:11435/api?x=1", "has a query"},
		{"ollama http://127.0.0.1:11435/#f", "has a fragment"},
		{"ollama http://127.0.0.1:11435?", "has a query"},
		{"comfy ftp://127.0.0.1:8189", `scheme "ftp"`},
		{"comfy http://admin@127.0.0.1:8189", "no password"},
		{"llm llamacpp http://127.0.0.1:8080?x=1", "has a query"},
		{"image a1111 unix:///run/a1111.sock", `scheme "unix"`},
		// A name is reported at its own line, inside the engine's block.
		{"llm vllm http://127.0.0.1:8000 {\n\t\t\tname a/b\"x\n\t\t}", `name "a/b\"x": want letters`},
		{"llm vllm http://127.0.0.1:8000 {\n\t\t\tname .\n\t\t}", `name ".": want letters`},
	} {
		src := "{\n\tgpu_turnstile {\n\t\tllm_busy_mode wait\n\t\t" + tc.option + "\n\t}\n}\n"
		_, err := adapt(t, src)
		line := "Caddyfile:4"
		if strings.Contains(tc.option, "name") {
			line = "Caddyfile:5"
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), line) {
			t.Errorf("%s: %v, want %q at %s", tc.option, err, tc.want, line)
		}
	}
	for _, tc := range []struct{ settings, want string }{
		{`"ollama":"http://127.0.0.1:1/?q=1"`, "has a query"},
		{`"llm":[{"kind":"ollama","url":"http://127.0.0.1:1#x"}]`, "has a fragment"},
		{`"image":[{"kind":"comfyui","url":"http://127.0.0.1:1","name":"a/b"}]`, `name "a/b"`},
	} {
		cfg := `{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{` + tc.settings + `}}}}}`
		if err := caddy.Load([]byte(cfg), true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("JSON %s: %v, want %q", tc.settings, err, tc.want)
		}
	}
	// A password in the URL is the engine's basic auth: taken.
	if _, err := adapt(t, "{\n\tgpu_turnstile {\n\t\tollama http://u:p@127.0.0.1:11435\n\t}\n}\n"); err != nil {
		t.Errorf("user:password@host refused: %v", err)
	}
}

// A check across options names the line of the option at fault, not the
// block's closing brace.
func TestCrossOptionErrorsNameTheOptionsLine(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		line        int
		want        string
	}{
		{"warm_model without an engine that warms", "\t\tcomfy http://127.0.0.1:8189\n\t\tllm vllm http://127.0.0.1:8000\n\t\twarm_model llama3.2\n", 5, "warm_model"},
		{"min_free_vram without comfy", "\t\tollama http://127.0.0.1:11435\n\t\tmin_free_vram 8GiB\n\t\tllm_busy_mode wait\n", 4, "min_free_vram"},
		{"two engines of one name", "\t\tollama http://127.0.0.1:11435\n\t\tllm llamacpp http://127.0.0.1:8080\n\t\tllm ollama http://127.0.0.1:11436\n", 5, "already named"},
		{"the shorthand after its class's entries", "\t\tllm ollama http://127.0.0.1:11436\n\t\tcomfy http://127.0.0.1:8189\n\t\tollama http://127.0.0.1:11435\n", 3, "already named"},
		{"hold_while needing another", "\t\tollama http://127.0.0.1:11435\n\t\tllm_busy_mode wait\n\t\thold_while gpu_busy 20 for 1s\n\t\tpresence_poll_interval 5s\n", 5, "hold_while"},
	} {
		src := "{\n\tgpu_turnstile {\n" + tc.block + "\t}\n}\n"
		_, err := adapt(t, src)
		at := fmt.Sprintf("Caddyfile:%d", tc.line)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), at) {
			t.Errorf("%s: %v, want %q at %s", tc.name, err, tc.want, at)
		}
	}
}

// A JSON value that does not decode names its field (encoding/json names
// none for a caddy.Duration that does not parse), and unknown fields are
// still refused.
func TestJSONDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ settings, want string }{
		{`"unload_timeout":"soon"`, `unload_timeout: `},
		{`"hold_release_after":"later"`, `hold_release_after: `},
		{`"max_waiting":"ten"`, `max_waiting: `},
		{`"llm":[{"kind":"ollama","url":"http://127.0.0.1:1","colour":"red"}]`, `llm: json: unknown field "colour"`},
		{`"unlod_timeout":"1s"`, `unknown field "unlod_timeout"`},
	} {
		cfg := `{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1",` + tc.settings + `}}}}}`
		err := caddy.Load([]byte(cfg), true)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"default"`) {
			t.Errorf("%s: %v, want %q for turnstile \"default\"", tc.settings, err, tc.want)
		}
	}
	cfg := `{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{}, "bogus":1}}}`
	if err := caddy.Load([]byte(cfg), true); err == nil || !strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Errorf("unknown app field: %v", err)
	}
}

// A directive naming an engine the turnstile lacks says which turnstile:
// "default", never "".
func TestDirectiveErrorsSayDefault(t *testing.T) {
	_, err := adapt(t, globalBlock+":8188 {\n\tgpu_turnstile {\n\t\tengine nosuch\n\t}\n}\n")
	if err == nil || !strings.Contains(err.Error(), `turnstile "default"`) {
		t.Errorf("unknown engine: %v, want it to name turnstile \"default\"", err)
	}
}
