package turnstile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// wait_notice adapts in the global block, a handler's block and
// gpu_turnstile_proxy's, as the JSON fields wait_notice.
func TestWaitNoticeAdapts(t *testing.T) {
	global := func(line string) string {
		return "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\t" + line + "\n\t}\n}\n"
	}
	for _, tc := range []struct{ name, input, want string }{
		{"global on", global("wait_notice") + ":11434 {\n\tgpu_turnstile\n}", `"wait_notice":"on"`},
		{"global interval", global("wait_notice 2s") + ":11434 {\n\tgpu_turnstile\n}", `"wait_notice":"2s"`},
		{"handler off", global("wait_notice") + ":11434 {\n\tgpu_turnstile {\n\t\twait_notice off\n\t}\n}", `"handler":"gpu_turnstile","wait_notice":"off"`},
		{"handler on", global("") + ":11434 {\n\tgpu_turnstile {\n\t\twait_notice\n\t}\n}", `"handler":"gpu_turnstile","wait_notice":"on"`},
		{"proxy", global("") + ":11434 {\n\tgpu_turnstile_proxy ollama {\n\t\twait_notice 10s\n\t\tflush_interval 1s\n\t}\n}", `"wait_notice":"10s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := adapt(t, tc.input)
			if err != nil {
				t.Fatal(err)
			}
			if s := jsonString(t, cfg); !strings.Contains(s, tc.want) {
				t.Fatalf("adapted %s, want %s", s, tc.want)
			}
		})
	}
	// The proxy's own option is not reverse_proxy's.
	routes := siteRoutes(t, global("")+":11434 {\n\tgpu_turnstile_proxy ollama {\n\t\twait_notice off\n\t}\n}", ":11434")
	guard, proxy := proxyHandlers(t, routes[0])
	if !strings.Contains(guard, `"wait_notice":"off"`) || strings.Contains(proxy, "wait_notice") {
		t.Fatalf("guard %s, proxy %s", guard, proxy)
	}
}

// An invalid wait_notice fails at adapt, naming the option and its line.
func TestWaitNoticeInvalid(t *testing.T) {
	global := "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t}\n}\n"
	for _, tc := range []struct {
		name, input, want string
		line              int
	}{
		{"global not a duration", "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\twait_notice soon\n\t}\n}\n", `wait_notice: "soon"`, 4},
		{"global too short", "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\twait_notice 10ms\n\t}\n}\n", `wait_notice: "10ms"`, 4},
		{"global two values", "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\twait_notice 1s 2s\n\t}\n}\n", "wait_notice: one value expected", 4},
		{"global twice", "{\n\tgpu_turnstile {\n\t\tollama http://127.0.0.1:11435\n\t\twait_notice\n\t\twait_notice off\n\t}\n}\n", "wait_notice: given twice, on lines 4 and 5", 5},
		{"handler", global + ":11434 {\n\tgpu_turnstile {\n\t\twait_notice -1s\n\t}\n}", `wait_notice: "-1s"`, 8},
		{"proxy", global + ":11434 {\n\tgpu_turnstile_proxy ollama {\n\t\twait_notice never\n\t}\n}", `wait_notice: "never"`, 8},
		{"proxy twice", global + ":11434 {\n\tgpu_turnstile_proxy ollama {\n\t\twait_notice\n\t\twait_notice off\n\t}\n}", "wait_notice: given twice, on lines 8 and 9", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, tc.input)
			if err == nil {
				t.Fatal("adapted, want an error")
			}
			for _, want := range []string{tc.want, fmt.Sprintf("Caddyfile:%d", tc.line)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q, want it to name %s", err, want)
				}
			}
		})
	}
}

// A JSON config's wait_notice is checked when it loads, the error naming
// the field.
func TestWaitNoticeJSON(t *testing.T) {
	load := func(turnstile, handler string) error {
		return caddy.Load([]byte(`{"admin":{"disabled":true},"apps":{"gpu_turnstile":{"turnstiles":{"default":{"ollama":"http://127.0.0.1:1"`+turnstile+`}}},
			"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[{"handler":"gpu_turnstile"`+handler+`}]}]}}}}}`), true)
	}
	defer caddy.Stop()
	for _, tc := range []struct{ turnstile, handler, want string }{
		{`,"wait_notice":"5s"`, `,"wait_notice":"off"`, ""},
		{`,"wait_notice":"on"`, ``, ""},
		{`,"wait_notice":"later"`, ``, `wait_notice: "later"`},
		{``, `,"wait_notice":"0s"`, `wait_notice: "0s"`},
		{`,"wait_notice":5}`, ``, "wait_notice"},
	} {
		turnstile := strings.TrimSuffix(tc.turnstile, "}")
		err := load(turnstile, tc.handler)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %s: %v, want %q", tc.turnstile, tc.handler, err, tc.want)
		}
	}
}
