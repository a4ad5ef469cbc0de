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
