package cli

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// docs/cli.md has a row for every exit code, and no other.
func TestExitCodesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Exit codes")
	if !ok {
		t.Fatal(`docs/cli.md has no "## Exit codes" section`)
	}
	rows := 0
	for line := range strings.Lines(table) {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| code") {
			rows++
		}
	}
	for _, c := range ExitCodes {
		if !strings.Contains(table, fmt.Sprintf("| %d | ", c.Code)) {
			t.Errorf("docs/cli.md has no row for exit code %d (%s)", c.Code, c.Meaning)
		}
	}
	if rows != len(ExitCodes) {
		t.Errorf("docs/cli.md's table has %d rows, the command %d codes", rows, len(ExitCodes))
	}
}

func TestExitFor(t *testing.T) {
	for status, want := range map[int]int{
		http.StatusConflict:            ExitBlocked,
		http.StatusServiceUnavailable:  ExitTimedOut,
		http.StatusNotFound:            ExitNotFound,
		http.StatusBadRequest:          ExitError,
		http.StatusInternalServerError: ExitError,
	} {
		if got := exitFor(status); got != want {
			t.Errorf("HTTP %d: exit %d, want %d", status, got, want)
		}
	}
}

func TestExplain(t *testing.T) {
	c := &client{addr: "localhost:2019"}
	err := c.explain(fmt.Errorf(`caddy responded with error: HTTP 409: {"error":"gpu_turnstile: busy","blocked_by":{"state":"image"}}`))
	if code(err) != ExitBlocked || err.Error() != "HTTP 409: gpu_turnstile: busy" {
		t.Errorf("a 409: %v (exit %d)", err, code(err))
	}
	err = c.explain(fmt.Errorf("caddy responded with error: HTTP 404: 404 page not found\n"))
	if code(err) != ExitNotFound || !strings.Contains(err.Error(), "built with the gpu_turnstile plugin") {
		t.Errorf("Caddy's own 404: %v", err)
	}
	err = c.explain(fmt.Errorf("performing request: dial tcp: connection refused"))
	if code(err) != ExitError || !strings.Contains(err.Error(), "is Caddy running?") {
		t.Errorf("unreachable: %v", err)
	}
}

// A Caddy that accepts the connection and never answers does not keep a
// status waiting past answerWithin.
func TestDoIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	defer func(d time.Duration) { answerWithin = d }(answerWithin)
	answerWithin = 50 * time.Millisecond
	c := &client{addr: ln.Addr().String()}
	if _, err := c.do(http.MethodGet, "/gpu_turnstile/status", nil); err == nil || code(err) != ExitError || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("a silent endpoint: %v", err)
	}
}
