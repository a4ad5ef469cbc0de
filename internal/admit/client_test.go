package admit

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClientHash(t *testing.T) {
	// printf %s browser-tab-1 | sha256sum
	if got, want := ClientHash("browser-tab-1"), "15964d1350e3513e"; got != want {
		t.Errorf("ClientHash = %q, want %q", got, want)
	}
	if ClientHash("") != "" {
		t.Error("an empty client_id has a hash")
	}
}

func TestImageWaiterClient(t *testing.T) {
	graph := `{"3":{"class_type":"KSampler","inputs":{"seed":1,"text":"` + strings.Repeat("p", modelScanLimit) + `"}}}`
	cases := []struct {
		name, body, want string
	}{
		{"first", `{"client_id":"tab-a","prompt":` + graph + `}`, ClientHash("tab-a")},
		{"after a large workflow", `{"prompt":` + graph + `,"client_id":"tab-a"}`, ClientHash("tab-a")},
		{"only inside the workflow", `{"prompt":{"1":{"inputs":{"client_id":"x"}}}}`, ""},
		{"none", `{"prompt":{}}`, ""},
		{"not a string", `{"client_id":7}`, ""},
		{"not JSON", `client_id=tab-a`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/prompt", nil)
			w := (&Ticket{body: &body{complete: true, chunks: [][]byte{[]byte(tc.body)}}}).Waiter(r, false)
			if w.Client != tc.want || w.Model != "" {
				t.Errorf("waiter %+v, want client %q", w, tc.want)
			}
			if strings.Contains(w.Client, "tab-a") {
				t.Error("the waiter shows the client_id")
			}
		})
	}
	r := httptest.NewRequest("POST", "/api/chat", nil)
	if w := (&Ticket{body: &body{complete: true, chunks: [][]byte{[]byte(`{"client_id":"x","model":"m"}`)}}}).Waiter(r, true); w.Client != "" {
		t.Errorf("an LLM request's waiter has a client: %+v", w)
	}
}
