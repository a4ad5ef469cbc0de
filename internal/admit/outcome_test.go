package admit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestOutcome(t *testing.T) {
	rec := httptest.NewRecorder()
	o := &Outcome{ResponseWriter: rec}
	o.WriteHeader(http.StatusInternalServerError)
	o.Write([]byte(`{"error":"cudaMalloc failed: out of memory"}`))
	o.Write([]byte(strings.Repeat("x", 4<<10)))
	status, head := o.Result()
	if status != 500 || !strings.HasPrefix(string(head), `{"error":"cudaMalloc`) || len(head) != outcomeHead {
		t.Fatalf("status %d, head %d bytes %.40q", status, len(head), head)
	}
	if rec.Body.Len() != 44+4<<10 {
		t.Fatalf("client got %d bytes", rec.Body.Len())
	}
	if http.NewResponseController(o).Flush() != nil {
		t.Fatal("flush does not reach the writer beneath")
	}

	ok := &Outcome{ResponseWriter: httptest.NewRecorder()}
	ok.Write([]byte("fine"))
	if status, head := ok.Result(); status != 200 || head != nil {
		t.Fatalf("a 200: status %d, head %q", status, head)
	}
}
