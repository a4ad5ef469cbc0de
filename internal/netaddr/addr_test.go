package netaddr

import "testing"

func TestEngineAddr(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:11435", "localhost:11435"},
		{"http://LocalHost:11435/", "localhost:11435"},
		{"http://[::1]:8189", "localhost:8189"},
		{"http://ollama", "ollama:80"},
		{"https://GPU.lan", "gpu.lan:443"},
		{"https://gpu.lan:8443", "gpu.lan:8443"},
		{"http://[fe80::1]:80", "[fe80::1]:80"},
	} {
		a, err := EngineAddr(tc.url)
		if err != nil || a.String() != tc.want {
			t.Errorf("EngineAddr(%q) = %v, %v; want %s", tc.url, a, err, tc.want)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://", "127.0.0.1:11435", "http://h:1:2", "::"} {
		if a, err := EngineAddr(bad); err == nil {
			t.Errorf("EngineAddr(%q) = %v, want an error", bad, a)
		}
	}
}

func TestHostPort(t *testing.T) {
	for url, want := range map[string]string{
		"http://127.0.0.1:11435/": "127.0.0.1:11435",
		"http://ollama":           "ollama:80",
		"https://gpu.lan":         "gpu.lan:443",
		"http://[::1]:8189":       "[::1]:8189",
	} {
		if got, err := HostPort(url); err != nil || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", url, got, err, want)
		}
	}
}

// An upstream matches the engine whose URL names it, loopback names as
// one; a unix socket matches none.
func TestUpstreamAddrMatchesEngineAddr(t *testing.T) {
	e, _ := EngineAddr("http://localhost:11435")
	for hp, want := range map[string]bool{
		"127.0.0.1:11435": true, "[::1]:11435": true, "LOCALHOST:11435": true,
		"127.0.0.1:11436": false, "/run/ollama.sock": false,
	} {
		if got := UpstreamAddr(hp) == e; got != want {
			t.Errorf("%s matches %v: %v, want %v", hp, e, got, want)
		}
	}
}
