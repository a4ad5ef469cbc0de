package turnstile

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFleetAdaptShowsTheExpansion runs `caddy adapt` on a front tier:
// gpu_turnstile_fleet is gpu_turnstile_classify, then reverse_proxy to
// the hosts with lb_policy gpu_turnstile and the retries a front tier
// needs.
func TestFleetAdaptShowsTheExpansion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	cfg := `:11434 {
	gpu_turnstile_fleet gpu-a:11434 gpu-b:11434 gpu-c:11434 {
		status_path /status
		fallback    least_conn
		stale       10s
		health_uri  /healthz
	}
}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "adapt", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), childEnv+"=1", "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	var adapted any
	if err := json.Unmarshal(out, &adapted); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	handlers := handlersWith(adapted, "gpu_turnstile_classify")
	if len(handlers) != 2 {
		t.Fatalf("want classify + reverse_proxy, got %s", out)
	}
	classify, proxy := jsonString(t, handlers[0]), jsonString(t, handlers[1])
	if !strings.Contains(classify, `"handler":"gpu_turnstile_classify"`) {
		t.Errorf("first handler: %s", classify)
	}
	for _, want := range []string{
		`"handler":"reverse_proxy"`,
		`"policy":"gpu_turnstile"`, `"status_path":"/status"`, `"stale":10000000000`, `"fallback":{"policy":"least_conn"}`,
		`"retries":2`, `"retry_match":[{"expression":"{http.reverse_proxy.status_code} in [429, 503]"}]`,
		`"request_buffers":4194304`, `"flush_interval":-1`,
		`{"dial":"gpu-a:11434"}`, `{"dial":"gpu-b:11434"}`, `{"dial":"gpu-c:11434"}`,
		`"uri":"/healthz"`,
	} {
		if !strings.Contains(proxy, want) {
			t.Errorf("reverse_proxy lacks %s: %s", want, proxy)
		}
	}
}

// handlersWith finds, in an adapted config, the list of handlers that
// holds one of the handler name.
func handlersWith(v any, name string) []any {
	switch v := v.(type) {
	case map[string]any:
		if hs, ok := v["handle"].([]any); ok {
			for _, h := range hs {
				if m, ok := h.(map[string]any); ok && m["handler"] == name {
					return hs
				}
			}
		}
		for _, e := range v {
			if hs := handlersWith(e, name); hs != nil {
				return hs
			}
		}
	case []any:
		for _, e := range v {
			if hs := handlersWith(e, name); hs != nil {
				return hs
			}
		}
	}
	return nil
}
