package turnstile

import (
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"

	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

func adapt(t testing.TB, caddyfile string) (map[string]any, error) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(cfg, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

func jsonString(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const globalBlock = `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
		comfy http://127.0.0.1:8189
	}
}
`

func TestCaddyfileValidForms(t *testing.T) {
	cases := []struct {
		name  string
		input string
		want  []string // fragments of the adapted JSON
	}{
		{"every option", `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
		comfy http://127.0.0.1:8189
		llm_busy_mode reject
		llm_busy_status 429
		busy_retry_after 45s
		llm_wait_timeout 5m
		unload_timeout 30s
		job_timeout 1h
		interrupt_grace 2m
		free_timeout 10s
		warm_model llama3.2
		warm_timeout 3m
		unload_poll_interval 250ms
		history_poll_interval 2s
		probe_timeout 3s
		backoff 500ms 30s
		prompt_capture_limit 128KiB
		max_image_streak 3
		min_free_vram 20GiB
		vram_probe comfy 1
		early_unload
		wait_buffer_limit 64MiB
		max_waiting 50
	}
}
:11434 {
	gpu_turnstile
	reverse_proxy 127.0.0.1:11435
}`, []string{
			`"gpu_turnstile":{"turnstiles":{"default":{`,
			`"llm_busy_mode":"reject"`, `"llm_busy_status":429`, `"busy_retry_after":45000000000`,
			`"llm_wait_timeout":300000000000`, `"job_timeout":3600000000000`, `"interrupt_grace":120000000000`, `"warm_model":"llama3.2"`,
			`"backoff_initial":500000000`, `"backoff_max":30000000000`, `"prompt_capture_limit":131072`,
			`"max_image_streak":3`, `{"handler":"gpu_turnstile"}`,
			`"min_free_vram":21474836480`, `"vram_probe":"comfy"`, `"gpu_index":1`, `"early_unload":true`,
			`"wait_buffer_limit":67108864`, `"max_waiting":50`,
		}},
		{"named turnstiles and classes", `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
	}
	gpu_turnstile gpu1 {
		comfy http://127.0.0.1:9189
	}
}
:8188 {
	@from_comfy remote_ip 10.0.0.5
	gpu_turnstile @from_comfy passthrough
	gpu_turnstile image {
		turnstile gpu1
	}
	gpu_turnstile @from_comfy llm {
		during_job reject
	}
	handle /healthz {
		gpu_turnstile_status gpu1
	}
	handle /status/full {
		gpu_turnstile_status {
			detail full
		}
	}
	handle /status/public {
		gpu_turnstile_status {
			detail public
		}
	}
	reverse_proxy 127.0.0.1:9189
}`, []string{
			`"gpu1":{"comfy":"http://127.0.0.1:9189"}`,
			`{"class":"passthrough","handler":"gpu_turnstile"}`,
			`{"class":"image","handler":"gpu_turnstile","turnstile":"gpu1"}`,
			`{"class":"llm","during_job":"reject","handler":"gpu_turnstile"}`,
			`{"handler":"gpu_turnstile_status","turnstile":"gpu1"}`,
			`{"detail":"full","handler":"gpu_turnstile_status"}`,
			`{"detail":"public","handler":"gpu_turnstile_status"}`,
		}},
		{"inside handle and route", globalBlock + `:11434 {
	handle /api/* {
		gpu_turnstile
		reverse_proxy 127.0.0.1:11435
	}
	route /v1/* {
		gpu_turnstile llm
		reverse_proxy 127.0.0.1:11435
	}
}`, []string{`{"handler":"gpu_turnstile"}`, `{"class":"llm","handler":"gpu_turnstile"}`}},
		{"empty URL disables a consumer", `{
	gpu_turnstile {
		ollama ""
		comfy http://127.0.0.1:8189
	}
}`, []string{`"default":{"comfy":"http://127.0.0.1:8189"}`}},
		{"holds handler", globalBlock + `:11434 {
	handle_path /gpu/* {
		basic_auth {
			launcher $2a$04$iLenRgmwoeYY8TwGYz7emOv6G1mnEHUSGHmkDedgE95i2zjNhWUmG
		}
		gpu_turnstile_holds
	}
	handle_path /gpu2/* {
		gpu_turnstile_holds {
			turnstile default
		}
	}
	reverse_proxy 127.0.0.1:11435
}`, []string{`"handler":"authentication"`, `{"handler":"gpu_turnstile_holds"}`, `{"handler":"gpu_turnstile_holds","turnstile":"default"}`}},
		{"auto retry-after", `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
		busy_retry_after auto 2m
	}
}`, []string{`"busy_retry_after":120000000000`, `"busy_retry_after_auto":true`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := adapt(t, tc.input)
			if err != nil {
				t.Fatal(err)
			}
			got := jsonString(t, cfg)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("adapted JSON lacks %s\n%s", w, got)
				}
			}
		})
	}
}

// The directive needs no `order` line: it lands after encode and the auth
// directives, before handle and reverse_proxy.
func TestDirectiveOrder(t *testing.T) {
	cfg, err := adapt(t, globalBlock+`:11434 {
	reverse_proxy 127.0.0.1:11435
	handle /x {
		respond "x"
	}
	gpu_turnstile
	encode gzip
	basic_auth {
		user $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonString(t, cfg)
	order := []string{`"authentication"`, `"encode"`, `"gpu_turnstile"`, `"subroute"`, `"reverse_proxy"`}
	last := -1
	for _, h := range order {
		i := strings.Index(got, `"handler":`+h)
		if i < last {
			t.Fatalf("%s out of order in %s", h, got)
		}
		last = i
	}
}

func TestCaddyfileInvalidForms(t *testing.T) {
	site := "\n:11434 {\n\tgpu_turnstile\n\treverse_proxy 127.0.0.1:11435\n}"
	opt := func(lines string) string {
		return "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\t" + lines + "\n\t}\n}" + site
	}
	cases := []struct{ name, input, want string }{
		{"no consumer", "{\n\tgpu_turnstile {\n\t\tllm_busy_mode wait\n\t}\n}" + site, "at least one of ollama and comfy"},
		{"bad URL", "{\n\tgpu_turnstile {\n\t\tollama 127.0.0.1:11435\n\t}\n}" + site, "ollama: invalid URL"},
		{"bad scheme", "{\n\tgpu_turnstile {\n\t\tcomfy ftp://x\n\t}\n}" + site, "comfy: invalid URL"},
		{"bad mode", opt("llm_busy_mode drop"), "llm_busy_mode"},
		{"status too low", opt("llm_busy_status 302"), "llm_busy_status"},
		{"status not a number", opt("llm_busy_status many"), "llm_busy_status"},
		{"bad duration", opt("unload_timeout soon"), "unload_timeout: invalid duration"},
		{"negative duration", opt("job_timeout -5m"), "job_timeout"},
		{"negative grace", opt("interrupt_grace -1s"), "interrupt_grace"},
		{"zero duration", opt("free_timeout 0s"), "free_timeout"},
		{"missing value", opt("warm_timeout"), "warm_timeout: missing value"},
		{"extra value", opt("probe_timeout 1s 2s"), "probe_timeout: one value expected"},
		{"backoff one value", opt("backoff 1s"), "backoff: want two durations"},
		{"backoff reversed", opt("backoff 10s 1s"), "backoff: max"},
		{"capture too small", opt("prompt_capture_limit 10B"), "prompt_capture_limit"},
		{"capture not a size", opt("prompt_capture_limit lots"), "prompt_capture_limit"},
		{"streak negative", opt("max_image_streak -1"), "max_image_streak"},
		{"unknown option", opt("gpu_count 2"), `unknown option "gpu_count"`},
		{"retry auto junk", opt("busy_retry_after auto 1m 2m"), "busy_retry_after"},
		{"duplicate turnstile", "{\n\tgpu_turnstile {\n\t\tollama http://a:1\n\t}\n\tgpu_turnstile default {\n\t\tollama http://b:1\n\t}\n}" + site, "defined twice"},
		{"bad name", "{\n\tgpu_turnstile bad/name {\n\t\tollama http://a:1\n\t}\n}", "invalid turnstile name"},
		{"no global option", ":11434 {\n\tgpu_turnstile\n}", "add the global option"},
		{"unknown turnstile", globalBlock + ":11434 {\n\tgpu_turnstile {\n\t\tturnstile gpu9\n\t}\n}", `no turnstile named "gpu9"`},
		{"unknown class", globalBlock + ":11434 {\n\tgpu_turnstile video\n}", `class "video"`},
		{"unknown handler option", globalBlock + ":11434 {\n\tgpu_turnstile {\n\t\tmode llm\n\t}\n}", `unknown option "mode"`},
		{"status unknown turnstile", globalBlock + ":11434 {\n\tgpu_turnstile_status gpu9\n}", `no turnstile named "gpu9"`},
		{"status detail value", globalBlock + ":11434 {\n\tgpu_turnstile_status {\n\t\tdetail all\n\t}\n}", `gpu_turnstile_status: detail "all": want full or public`},
		{"status detail no value", globalBlock + ":11434 {\n\tgpu_turnstile_status {\n\t\tdetail\n\t}\n}", "detail"},
		{"status detail twice", globalBlock + ":11434 {\n\tgpu_turnstile_status {\n\t\tdetail full\n\t\tdetail public\n\t}\n}", "detail: given twice, on lines 9 and 10"},
		{"holds unknown turnstile", globalBlock + ":11434 {\n\tgpu_turnstile_holds gpu9\n}", `no turnstile named "gpu9"`},
		{"holds unknown option", globalBlock + ":11434 {\n\tgpu_turnstile_holds {\n\t\tttl 1m\n\t}\n}", `gpu_turnstile_holds: unknown option "ttl"`},
		{"holds two names", globalBlock + ":11434 {\n\tgpu_turnstile_holds a b\n}", "wrong argument count"},
		{"vram size", opt("min_free_vram lots"), "min_free_vram"},
		{"vram probe", opt("vram_probe nvml"), "vram_probe"},
		{"vram probe index", opt("vram_probe comfy -1"), "vram_probe"},
		{"vram probe needs comfy", opt("min_free_vram 1GiB"), "comfy probe needs comfy"},
		{"early_unload takes no value", opt("early_unload yes"), "Caddyfile:"},
		{"during_job value", globalBlock + ":11434 {\n\tgpu_turnstile {\n\t\tduring_job wait\n\t}\n}", "during_job"},
		{"wait buffer not a size", opt("wait_buffer_limit lots"), "wait_buffer_limit"},
		{"wait buffer zero", opt("wait_buffer_limit 0"), "wait_buffer_limit"},
		{"wait buffer too large", opt("wait_buffer_limit 2TiB"), "wait_buffer_limit"},
		{"wait buffer two values", opt("wait_buffer_limit 1MiB 2MiB"), "wait_buffer_limit: one value expected"},
		{"max waiting zero", opt("max_waiting 0"), "max_waiting"},
		{"max waiting not a number", opt("max_waiting many"), "max_waiting"},
		{"option given twice", opt("wait_buffer_limit 1MiB\n\t\tmax_waiting 5\n\t\twait_buffer_limit 2MiB"), "wait_buffer_limit: given twice, on lines 4 and 6"},
		{"flag given twice", opt("early_unload\n\t\tearly_unload"), "early_unload: given twice, on lines 4 and 5"},
		{"auto then a duration", opt("busy_retry_after auto\n\t\tbusy_retry_after 10s"), "busy_retry_after: given twice, on lines 4 and 5"},
		{"handler option given twice", "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t}\n}\n:11434 {\n\tgpu_turnstile {\n\t\tduring_job allow\n\t\tduring_job reject\n\t}\n\treverse_proxy 127.0.0.1:11435\n}", "during_job: given twice, on lines 8 and 9"},
		{"warm without ollama", "{\n\tgpu_turnstile {\n\t\tcomfy http://a:1\n\t\twarm_model llama3.2\n\t}\n}", "warm_model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, tc.input)
			if err == nil {
				t.Fatalf("adapted without error:\n%s", tc.input)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Caddyfile:") {
				t.Fatalf("error %q, want it to name %q and the line", err, tc.want)
			}
		})
	}
}

// Every Caddyfile in the repository adapts.
func TestExamplesAdapt(t *testing.T) {
	files, _ := filepath.Glob("examples/*/Caddyfile")
	more, _ := filepath.Glob("examples/*.Caddyfile")
	files = append(append(files, more...), "Caddyfile.example")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := adapt(t, string(b)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func FuzzCaddyfile(f *testing.F) {
	f.Add("ollama http://127.0.0.1:11435\nbackoff 1s 60s")
	f.Add("comfy http://127.0.0.1:8189\nbusy_retry_after auto 5m\nprompt_capture_limit 64KiB")
	f.Add("llm_busy_status 429\nllm_busy_mode reject")
	f.Fuzz(func(t *testing.T, body string) {
		if strings.ContainsAny(body, "{}") {
			return // keep the fuzzer inside the option block
		}
		cfg, err := adapt(t, "{\n\tgpu_turnstile {\n"+body+"\n\t}\n}")
		if err != nil {
			return
		}
		// Whatever adapts must validate: the parser and Validate agree.
		raw := jsonString(t, cfg["apps"].(map[string]any)["gpu_turnstile"])
		var app App
		if err := json.Unmarshal([]byte(raw), &app); err != nil {
			t.Fatal(err)
		}
		for name, s := range app.Turnstiles {
			if _, err := tcfg.Validate(*s); err != nil {
				t.Fatalf("%s adapted but does not validate: %v\n%s", name, err, body)
			}
		}
	})
}
