package admit

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func bodyRequest(body []byte, chunked bool) *http.Request {
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd)
	}
	r := httptest.NewRequest("POST", "/api/chat", rd)
	if chunked {
		r.ContentLength = -1
	}
	return r
}

// TestWaitBodyReadsBackAndGivesBack: the buffered body reads back whole,
// is counted while it is held, and is given back once read, however it
// was sent and whatever its size.
func TestWaitBodyReadsBackAndGivesBack(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		chunked bool
		held    int64 // counted while waiting
	}{
		{"known size", 3000, false, 3000},
		{"known size over the per-request limit", 40 << 10, false, 32 << 10},
		{"chunked", 3000, true, 1<<10 + 2<<10},
		{"chunked over several chunks", 20 << 10, true, 1<<10 + 2<<10 + 4<<10 + 8<<10 + 16<<10},
		{"chunked over the per-request limit", 40 << 10, true, 32 << 10},
		{"chunked empty", 0, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b Budget
			body := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
			r := bodyRequest(body, tc.chunked)
			ticket, err := b.Admit(httptest.NewRecorder(), r, Limits{Buffer: 256 << 20, Body: 32 << 10}, time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if got := b.bytes.Load(); got != tc.held {
				t.Fatalf("%d bytes counted while waiting, want %d", got, tc.held)
			}
			ticket.StopWaiting()
			got, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read back %d bytes (%v), want the %d sent", len(got), err, len(body))
			}
			if n := b.bytes.Load(); n != 0 {
				t.Fatalf("%d bytes still counted after the body was read", n)
			}
			ticket.Done()
			if n, w := b.bytes.Load(), b.waiting.Load(); n != 0 || w != 0 {
				t.Fatalf("after done: %d bytes, %d waiting", n, w)
			}
		})
	}
}

// TestOverloadWarnsOncePerBurst: the first refusal of a burst is logged;
// the next warning comes only after the budget has fallen below half.
func TestOverloadWarnsOncePerBurst(t *testing.T) {
	var b Budget
	core, logs := observer.New(zap.WarnLevel)
	lim := Limits{Buffer: 12 << 10, Body: 8 << 20, Log: zap.New(core)}
	body := make([]byte, 4<<10)
	burst := func() []*Ticket {
		var admitted []*Ticket
		for range 5 {
			ticket, err := b.Admit(httptest.NewRecorder(), bodyRequest(body, false), lim, time.Now().Add(time.Minute))
			if err == nil {
				admitted = append(admitted, ticket)
			}
		}
		if len(admitted) != 3 {
			t.Fatalf("%d of 5 admitted with 4 KiB bodies and a 12 KiB limit, want 3", len(admitted))
		}
		return admitted
	}
	first := burst()
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d warnings for a burst of 2 refusals, want 1", n)
	}
	first[0].Done() // 8 KiB of 12 held: not below half, still quiet
	again, err := b.Admit(httptest.NewRecorder(), bodyRequest(body, false), lim, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err) // fits again
	}
	if _, err := b.Admit(httptest.NewRecorder(), bodyRequest(body, false), lim, time.Now().Add(time.Minute)); err == nil {
		t.Fatal("a fourth 4 KiB body fit in 12 KiB")
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d warnings before the budget fell below half, want 1", n)
	}
	for _, ticket := range append(first[1:], again) { // everything drains
		ticket.Done()
	}
	burst()
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d warnings after a second burst, want 2", n)
	}
	if msg := logs.All()[0]; msg.ContextMap()["limit"] != "wait_buffer_limit" {
		t.Fatalf("warning %v does not name the limit", msg.ContextMap())
	}
}
