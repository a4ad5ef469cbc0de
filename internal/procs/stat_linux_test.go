package procs

import "testing"

func TestParseStat(t *testing.T) {
	// comm may hold spaces and parentheses.
	line := "4242 (llama server (x)) S 17 4242 4200 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	p, state, ok := parseStat([]byte(line))
	if !ok || state != 'S' || p.Name != "llama server (x)" || p.PPID != 17 || p.Session != 4200 || p.Start != 123456 {
		t.Fatalf("parseStat = %+v %q %v", p, state, ok)
	}
	if _, _, ok := parseStat([]byte("4242 (x) S 1 2")); ok {
		t.Fatal("a short stat line parsed")
	}
}
