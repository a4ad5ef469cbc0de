package route

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestGuardCheck(t *testing.T) {
	g, err := NewGuard([]string{"http://127.0.0.1:11435", "http://comfy.lan", "https://[::1]:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, hp := range []string{
		"127.0.0.1:11435", "localhost:11435", "[::1]:11435", "LOCALHOST:11435",
		"comfy.lan:80", "Comfy.LAN:80", "127.0.0.1:8443", "localhost:8443",
	} {
		if mis, _ := g.Check(hp); mis {
			t.Errorf("%s is an engine, judged misrouted", hp)
		}
	}
	for _, hp := range []string{"127.0.0.1:9999", "comfy.lan:443", "127.0.0.2:11435", "10.0.0.5:11435", "/run/ollama.sock", "comfy.lan"} {
		mis, first := g.Check(hp)
		if !mis || !first {
			t.Errorf("Check(%s) = %v, %v; want misrouted, first seen", hp, mis, first)
		}
		if mis, first := g.Check(hp); !mis || first {
			t.Errorf("Check(%s) again = %v, %v; want misrouted, seen before", hp, mis, first)
		}
	}
	w := g.Warnings()
	if len(w) != 6 || !strings.Contains(w[0], "127.0.0.1:9999") || !strings.Contains(w[5], "comfy.lan,") {
		t.Fatalf("warnings %q", w)
	}
	// The public view's: the same warnings without the addresses.
	p := g.PublicWarnings()
	if len(p) != 6 || p[0] != strings.Replace(w[0], "127.0.0.1:9999", "an upstream", 1) {
		t.Fatalf("public warnings %q", p)
	}
	for _, s := range p {
		if strings.Contains(s, "comfy.lan") || strings.Contains(s, "10.0.0.5") || strings.Contains(s, ":9999") {
			t.Errorf("public warning %q names an address", s)
		}
	}
}

func TestGuardWarningsBounded(t *testing.T) {
	g, _ := NewGuard([]string{"http://127.0.0.1:1"})
	if w := g.Warnings(); w != nil {
		t.Fatalf("warnings %q before any misrouting, want none", w)
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() { g.Check(fmt.Sprintf("10.0.0.%d:80", i)) })
	}
	wg.Wait()
	if w := g.Warnings(); len(w) != MaxWarnings {
		t.Fatalf("%d warnings, want %d", len(w), MaxWarnings)
	}
	// Every upstream is still remembered, so logged once.
	for i := range 40 {
		if _, first := g.Check(fmt.Sprintf("10.0.0.%d:80", i)); first {
			t.Fatalf("10.0.0.%d:80 seen as new twice", i)
		}
	}
}

func TestSampler(t *testing.T) {
	var s Sampler
	for i := range Always {
		if !s.Due() {
			t.Fatalf("request %d not checked; the first %d all are", i+1, Always)
		}
	}
	const n = 64000
	due := 0
	for range n {
		if s.Due() {
			due++
		}
	}
	if due != n/Every {
		t.Fatalf("%d of %d requests checked after the first %d, want one in %d", due, n, Always, Every)
	}
}

func BenchmarkGuardCheckEngine(b *testing.B) {
	g, _ := NewGuard([]string{"http://127.0.0.1:11435"})
	b.ReportAllocs()
	for b.Loop() {
		g.Check("127.0.0.1:11435")
	}
}

func TestUpstream(t *testing.T) {
	for url, want := range map[string]string{
		"http://127.0.0.1:11435":  "http://127.0.0.1:11435",
		"http://127.0.0.1:11435/": "http://127.0.0.1:11435",
		"https://gpu.lan":         "https://gpu.lan",
		"http://[::1]:8189":       "http://[::1]:8189",
	} {
		if got, err := Upstream(url); err != nil || got != want {
			t.Errorf("Upstream(%q) = %q, %v; want %q", url, got, err, want)
		}
	}
	for url, want := range map[string]string{
		"http://u:p@h:1":   "credentials",
		"http://u@h:1":     "credentials",
		"http://h:1/comfy": "a path (/comfy)",
		"http://h:1/?x=1":  "a query",
		"http://h:1?":      "a query",
		"http://h:1#f":     "a fragment",
		"ftp://h:1":        "http(s)",
		"h:1":              "http(s)",
		"http://h:1\x7f":   "parse",
	} {
		if got, err := Upstream(url); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Upstream(%q) = %q, %v; want an error naming %s", url, got, err, want)
		}
	}
}
