package turnstile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// `llm KIND URL` and `image KIND URL`, repeatable, any mix, with an
// optional name; `ollama URL` and `comfy URL` are their shorthands.
func TestCaddyfileEngines(t *testing.T) {
	cfg, err := adapt(t, `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
		llm llamacpp http://127.0.0.1:8081
		llm ollama http://127.0.0.1:11436 {
			name ollama2
		}
		image comfyui http://127.0.0.1:8189
		image a1111 http://127.0.0.1:7861 {
			name forge
		}
	}
}
:7860 {
	gpu_turnstile {
		engine forge
	}
	reverse_proxy 127.0.0.1:7861
}`)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonString(t, cfg)
	for _, want := range []string{
		`"ollama":"http://127.0.0.1:11435"`,
		`"llm":[{"kind":"llamacpp","url":"http://127.0.0.1:8081"},{"kind":"ollama","name":"ollama2","url":"http://127.0.0.1:11436"}]`,
		`"image":[{"kind":"comfyui","url":"http://127.0.0.1:8189"},{"kind":"a1111","name":"forge","url":"http://127.0.0.1:7861"}]`,
		`"engine":"forge"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("adapted config lacks %s:\n%s", want, got)
		}
	}
}

func TestCaddyfileEngineErrors(t *testing.T) {
	block := func(lines string) string {
		return "{\n\tgpu_turnstile {\n\t\t" + lines + "\n\t}\n}\n:11434 {\n\tgpu_turnstile\n\treverse_proxy 127.0.0.1:1\n}"
	}
	for _, tc := range []struct{ name, input, want string }{
		{"unknown llm kind", block("llm tgi http://a:1"), `llm: kind "tgi": want one of llamacpp, llamaswap, ollama, vllm`},
		{"image kind as llm", block("llm comfyui http://a:1"), `llm: kind "comfyui"`},
		{"unknown image kind", block("image invokeai http://a:1"), `image: kind "invokeai": want one of a1111, comfyui`},
		{"no URL", block("llm vllm"), "llm: want `llm KIND URL [{ name NAME }]`"},
		{"bad URL", block("llm vllm localhost:8000"), "llm vllm"},
		{"two of a kind unnamed", block("llm llamacpp http://a:1\n\t\tllm llamacpp http://b:1"), `already named "llamacpp"`},
		{"shorthand and its kind", block("ollama http://a:1\n\t\tllm ollama http://b:1"), `already named "ollama"`},
		{"names clash across classes", block("llm vllm http://a:1 {\n\t\t\tname x\n\t\t}\n\t\timage a1111 http://b:1 {\n\t\t\tname x\n\t\t}"), `already named "x"`},
		{"unknown engine option", block("llm vllm http://a:1 {\n\t\t\tlevel 2\n\t\t}"), `llm: unknown option "level"`},
		{"name twice", block("llm vllm http://a:1 {\n\t\t\tname a\n\t\t\tname b\n\t\t}"), "name: given twice"},
		{"warm without a warming engine", block("llm vllm http://a:1\n\t\twarm_model m"), "warm_model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, tc.input)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Caddyfile:") {
				t.Fatalf("error %v, want it to name %q and the line", err, tc.want)
			}
		})
	}
}

// A handler's engine must be an image engine of its turnstile, in JSON as
// in the Caddyfile; JSON engines get the Caddyfile's checks.
func TestJSONEngineChecks(t *testing.T) {
	for _, tc := range []struct{ turnstile, handler, want string }{
		{`"image":[{"kind":"a1111","url":"http://127.0.0.1:1"}]`, `"engine":"forge"`, `engine "forge"`},
		{`"llm":[{"kind":"tgi","url":"http://127.0.0.1:1"}]`, ``, `llm: kind "tgi"`},
		{`"llm":[{"kind":"vllm"}]`, ``, `llm vllm: no URL`},
		{`"llm":[{"kind":"vllm","url":"http://127.0.0.1:1"},{"kind":"vllm","url":"http://127.0.0.1:2"}]`, ``, `already named "vllm"`},
	} {
		handler := `{"handler":"gpu_turnstile"` + map[bool]string{true: "," + tc.handler, false: ""}[tc.handler != ""] + `}`
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{%s}}},
			"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[%s]}]}}}}}`, tc.turnstile, handler)
		err := caddy.Load([]byte(cfg), true)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want an error naming %s", tc.turnstile, tc.handler, err, tc.want)
		}
	}
	caddy.Stop()
}

func TestCaddyfilePresence(t *testing.T) {
	cfg, err := adapt(t, "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:1\n\t\thold_while process steam *.exe\n\t\thold_while process blender\n\t\thold_while gpu_process except Xorg\n\t\thold_release_after 1m\n\t\tpresence_poll_interval 5s\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	got := jsonString(t, cfg)
	for _, want := range []string{`"hold_while_process":["steam","*.exe","blender"]`, `"hold_while_gpu_process":true`,
		`"hold_while_gpu_except":["Xorg"]`, `"hold_release_after":60000000000`, `"presence_poll_interval":5000000000`} {
		if !strings.Contains(got, want) {
			t.Errorf("adapted config lacks %s:\n%s", want, got)
		}
	}
	block := func(lines string) string {
		return "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:1\n\t\t" + lines + "\n\t}\n}"
	}
	for _, tc := range []struct{ input, want string }{
		{block("hold_while"), "hold_while: want"},
		{block("hold_while process"), "hold_while process: name at least one"},
		{block("hold_while process a/b"), "hold_while process"},
		{block("hold_while window steam"), `"window" is neither`},
		{block("hold_while gpu_process but Xorg"), "gpu_process [except NAME...]"},
		{block("hold_while gpu_process\n\t\thold_while gpu_process"), "given twice"},
		{block("hold_release_after soon"), "hold_release_after"},
	} {
		if _, err := adapt(t, tc.input); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Caddyfile:") {
			t.Errorf("%q: error %v, want %q and the line", tc.input, err, tc.want)
		}
	}
	// JSON gets the same checks, naming its fields.
	for _, tc := range []struct{ field, value string }{
		{"hold_while_process", `["a/b"]`}, {"hold_release_after", "-1"}, {"hold_while_gpu_except", `["x"]`},
	} {
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1","%s":%s}}}}}`, tc.field, tc.value)
		if err := caddy.Load([]byte(cfg), true); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %s: %v, want an error naming %s", tc.field, tc.value, err, tc.field)
		}
	}
}
