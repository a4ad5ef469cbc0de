package turnstile

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// proxyRoute is a route of an adapted site, as the tests read it.
type proxyRoute struct {
	Match  []map[string]any  `json:"match"`
	Handle []json.RawMessage `json:"handle"`
}

// siteRoutes adapts a Caddyfile and returns the routes of the site on
// listen.
func siteRoutes(t *testing.T, caddyfile, listen string) []proxyRoute {
	t.Helper()
	cfg, err := adapt(t, caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	var http struct {
		Servers map[string]struct {
			Listen []string     `json:"listen"`
			Routes []proxyRoute `json:"routes"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(jsonString(t, cfg["apps"].(map[string]any)["http"])), &http); err != nil {
		t.Fatal(err)
	}
	for _, s := range http.Servers {
		if len(s.Listen) == 1 && s.Listen[0] == listen {
			return s.Routes
		}
	}
	t.Fatalf("no server on %s in %s", listen, jsonString(t, cfg))
	return nil
}

// proxyHandlers is the gpu_turnstile and reverse_proxy of the one route
// that gpu_turnstile_proxy made, as JSON.
func proxyHandlers(t *testing.T, r proxyRoute) (guard, proxy string) {
	t.Helper()
	if len(r.Handle) != 2 || !strings.Contains(string(r.Handle[0]), `"handler":"gpu_turnstile"`) ||
		!strings.Contains(string(r.Handle[1]), `"handler":"reverse_proxy"`) {
		t.Fatalf("route %s, want gpu_turnstile then reverse_proxy", r.Handle)
	}
	return string(r.Handle[0]), string(r.Handle[1])
}

const proxyGlobal = `{
	gpu_turnstile {
		ollama http://127.0.0.1:11435
		comfy http://127.0.0.1:8189
		image a1111 https://forge.lan {
			name forge
		}
	}
	gpu_turnstile gpu1 {
		llm llamacpp http://[::1]:8081/
	}
}
`

// gpu_turnstile_proxy expands into gpu_turnstile guarding its engine's
// routes and reverse_proxy to the engine's URL from the global options.
func TestProxyDirectiveExpands(t *testing.T) {
	for _, tc := range []struct {
		name, site string
		guard      []string // fragments of the gpu_turnstile handler
		proxy      []string // fragments of the reverse_proxy handler
		notProxy   []string
	}{
		{"LLM engine streams", "gpu_turnstile_proxy ollama",
			[]string{`"engine":"ollama"`, `"engine_routes":true`},
			[]string{`"upstreams":[{"dial":"127.0.0.1:11435"}]`, `"flush_interval":-1`}, []string{`"transport"`}},
		{"image engine", "gpu_turnstile_proxy comfyui",
			[]string{`"engine":"comfyui"`, `"engine_routes":true`},
			[]string{`"upstreams":[{"dial":"127.0.0.1:8189"}]`}, []string{`"flush_interval"`}},
		{"the block's flush_interval", "gpu_turnstile_proxy ollama {\n\t\tflush_interval 100ms\n\t}",
			nil, []string{`"flush_interval":100000000`}, []string{`"flush_interval":-1`}},
		{"https engine gets TLS", "gpu_turnstile_proxy forge",
			[]string{`"engine":"forge"`},
			[]string{`"upstreams":[{"dial":"forge.lan:443"}]`, `"transport":{"protocol":"http","tls":{}}`}, nil},
		{"https engine, a transport block", "gpu_turnstile_proxy forge {\n\t\ttransport http {\n\t\t\tdial_timeout 3s\n\t\t}\n\t}",
			nil, []string{`"tls":{}`, `"dial_timeout":3000000000`}, nil},
		{"named turnstile", "gpu_turnstile_proxy llamacpp {\n\t\tturnstile gpu1\n\t\theader_up X-Via turnstile\n\t}",
			[]string{`"turnstile":"gpu1"`, `"engine":"llamacpp"`},
			[]string{`"upstreams":[{"dial":"[::1]:8081"}]`, `"X-Via":["turnstile"]`, `"flush_interval":-1`}, nil},
		{"reverse_proxy's own subdirectives", "gpu_turnstile_proxy ollama {\n\t\theader_up X-To to\n\t\tlb_retries 2\n\t\t@err status 5xx\n\t\thandle_response @err {\n\t\t\trespond \"engine error\" 502\n\t\t}\n\t}",
			nil, []string{`"X-To":["to"]`, `"retries":2`, `"handle_response"`, `"engine error"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes := siteRoutes(t, proxyGlobal+":11434 {\n\t"+tc.site+"\n}", ":11434")
			if len(routes) != 1 || routes[0].Match != nil {
				t.Fatalf("routes %+v, want one, matching all", routes)
			}
			guard, proxy := proxyHandlers(t, routes[0])
			for _, want := range tc.guard {
				if !strings.Contains(guard, want) {
					t.Errorf("gpu_turnstile %s lacks %s", guard, want)
				}
			}
			for _, want := range tc.proxy {
				if !strings.Contains(proxy, want) {
					t.Errorf("reverse_proxy %s lacks %s", proxy, want)
				}
			}
			for _, not := range tc.notProxy {
				if strings.Contains(proxy, not) {
					t.Errorf("reverse_proxy %s has %s", proxy, not)
				}
			}
		})
	}
}

// A matcher selects the requests of the route; the site's handle blocks
// (the status at /healthz) come before the directive, whatever the order
// they are written in.
func TestProxyDirectiveMatcherAndOrder(t *testing.T) {
	routes := siteRoutes(t, proxyGlobal+`:8188 {
	@jobs path /prompt /api/prompt
	gpu_turnstile_proxy @jobs comfyui
	handle /healthz {
		gpu_turnstile_status
	}
	encode gzip
	respond 404
}`, ":8188")
	var order []string
	for _, r := range routes {
		var h struct{ Handler string }
		json.Unmarshal(r.Handle[0], &h)
		order = append(order, h.Handler)
	}
	if got := strings.Join(order, " "); got != "encode subroute static_response gpu_turnstile" {
		t.Fatalf("routes in the order %q, want encode, handle /healthz, respond, then gpu_turnstile_proxy's", got)
	}
	last := routes[len(routes)-1]
	proxyHandlers(t, last)
	if got := jsonString(t, last.Match); got != `[{"path":["/prompt","/api/prompt"]}]` {
		t.Fatalf("the route matches %s, want the directive's matcher", got)
	}
}

func TestProxyDirectiveErrors(t *testing.T) {
	site := func(lines string) string { return proxyGlobal + ":11434 {\n\t" + lines + "\n}" }
	for _, tc := range []struct {
		name, input string
		want        []string
		line        int
	}{
		{"no engine", site("gpu_turnstile_proxy"), []string{"want `gpu_turnstile_proxy [<matcher>] ENGINE"}, 14},
		{"two engines", site("gpu_turnstile_proxy ollama comfyui"), []string{`one engine expected, got "comfyui"`}, 14},
		{"unknown engine", site("gpu_turnstile_proxy vllm"),
			[]string{`turnstile "default" has no engine named "vllm" (engines: comfyui, forge, ollama)`}, 14},
		{"unknown engine, named turnstile", site("gpu_turnstile_proxy ollama {\n\t\tturnstile gpu1\n\t}"),
			[]string{`turnstile "gpu1" has no engine named "ollama" (engines: llamacpp)`}, 14},
		{"unknown turnstile", site("gpu_turnstile_proxy ollama {\n\t\tturnstile gpu2\n\t}"), []string{`no turnstile named "gpu2"`}, 15},
		{"no global options", ":11434 {\n\tgpu_turnstile_proxy ollama\n}", []string{`no turnstile named "default"`}, 2},
		{"to", site("gpu_turnstile_proxy ollama {\n\t\tflush_interval 1s\n\t\tto 127.0.0.1:9999\n\t}"), []string{"to is not allowed", "engine's URL"}, 16},
		{"dynamic", site("gpu_turnstile_proxy ollama {\n\t\tdynamic a example.com\n\t}"), []string{"dynamic is not allowed"}, 15},
		{"turnstile twice", site("gpu_turnstile_proxy ollama {\n\t\tturnstile default\n\t\tturnstile gpu1\n\t}"), []string{"turnstile: given twice, on lines 15 and 16"}, 16},
		{"turnstile with no name", site("gpu_turnstile_proxy ollama {\n\t\tturnstile\n\t}"), []string{"want `turnstile NAME`"}, 15},
		{"turnstile with a block", site("gpu_turnstile_proxy ollama {\n\t\tturnstile default {\n\t\t\tx\n\t\t}\n\t}"), []string{"want `turnstile NAME`"}, 15},
		{"reverse_proxy's error", site("gpu_turnstile_proxy ollama {\n\t\tlb_retries many\n\t}"), []string{"many"}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, tc.input)
			if err == nil {
				t.Fatal("adapted, want an error")
			}
			for _, want := range append(tc.want, fmt.Sprintf("Caddyfile:%d", tc.line)) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q, want it to name %s", err, want)
				}
			}
		})
	}
}

// An engine URL that an upstream cannot carry is refused, naming the
// option that gives it, without its password.
func TestProxyDirectiveEngineURLs(t *testing.T) {
	for _, tc := range []struct{ option, want string }{
		{"ollama http://127.0.0.1:11435/ollama", "gpu_turnstile_proxy ollama: the engine's URL (ollama http://127.0.0.1:11435/ollama) has a path (/ollama)"},
		{"llm ollama http://me:secret@127.0.0.1:11435", "(llm ollama http://me:xxxxx@127.0.0.1:11435) has credentials"},
	} {
		input := "{\n\tgpu_turnstile {\n\t\t" + tc.option + "\n\t}\n}\n:11434 {\n\tgpu_turnstile_proxy ollama\n}"
		_, err := adapt(t, input)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Caddyfile:7") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %v, want it to name %q and line 7, without the password", tc.option, err, tc.want)
		}
	}
}

// engine_routes in JSON: it needs an engine, which may be of either
// class but must be one of the turnstile's.
func TestJSONEngineRoutes(t *testing.T) {
	load := func(handler string) error {
		return caddy.Load([]byte(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1","comfy":"http://127.0.0.1:2"}}},
			"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[`+handler+`]}]}}}}}`), true)
	}
	defer caddy.Stop()
	for handler, want := range map[string]string{
		`{"handler":"gpu_turnstile","engine_routes":true}`:                   "engine_routes needs engine",
		`{"handler":"gpu_turnstile","engine_routes":true,"engine":"vllm"}`:   `engine "vllm": turnstile "default" has no engine of that name (engines: comfyui, ollama)`,
		`{"handler":"gpu_turnstile","engine":"ollama"}`:                      `engine "ollama": turnstile "default" has no image engine`,
		`{"handler":"gpu_turnstile","engine_routes":true,"engine":"ollama"}`: "",
	} {
		err := load(handler)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", handler, err, want)
		}
	}
}

// Whatever the tokens, the directive's parser answers an error or a
// config, and never panics.
func FuzzProxyDirective(f *testing.F) {
	for _, seed := range []string{
		"ollama",
		"@m comfyui",
		"ollama {\n\tturnstile gpu1\n}",
		"ollama {\n\tturnstile\n\tturnstile x {\n\t}\n}",
		"forge {\n\tflush_interval 1s\n\ttransport http {\n\t\ttls\n\t}\n}",
		"ollama {\n\t@e status 500\n\thandle_response @e {\n\t\trespond x\n\t}\n}",
		"ollama {\n\tto a b\n\tdynamic\n}",
		"{\n}",
		"ollama {}",
		"ollama comfyui {\n}",
		"* ollama {\n\t{\n\t}\n}",
		"/p ollama {\n\theader_up to dynamic\n}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		input := proxyGlobal + ":11434 {\n\t@m path /x\n\tgpu_turnstile_proxy " + body + "\n}"
		cfg, err := adapt(t, input)
		if err != nil {
			return
		}
		// What adapts is a route that gpu_turnstile_proxy made, whole.
		if got := jsonString(t, cfg); strings.Contains(got, `"engine_routes":true`) && !strings.Contains(got, `"reverse_proxy"`) {
			t.Fatalf("a guard without its reverse_proxy from %q:\n%s", body, got)
		}
	})
}
