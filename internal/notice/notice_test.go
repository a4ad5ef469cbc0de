package notice

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Whether a request streams is read from its whole body, with its API's
// default; unknown is no stream.
func TestRead(t *testing.T) {
	long := `"messages":[{"content":"` + strings.Repeat("x", 70<<10) + `"}]`
	for _, tc := range []struct {
		shape   Shape
		body    string
		nilBody bool
		model   string
		streams bool
	}{
		{OllamaChat, `{"model":"m"}`, false, "m", true},
		{OllamaGenerate, `{"model":"m","stream":false}`, false, "", false},
		{OllamaChat, `{"model":"m","stream":null}`, false, "m", true},
		{OpenAI, `{"model":"m"}`, false, "", false},
		{OpenAI, `{"model":"m",` + long + `,"stream":true}`, false, "m", true},
		{OpenAI, `{"model":"m","stream":true`, false, "", false}, // cut short
		{OpenAI, `{"stream":"yes"}`, false, "", false},
		{OllamaChat, `[1]`, false, "", false},
		{OllamaChat, ``, true, "", false},
	} {
		var model string
		var streams bool
		if tc.nilBody {
			model, streams = Read(tc.shape, nil)
		} else {
			model, streams = Read(tc.shape, []byte(tc.body))
		}
		if streams != tc.streams || (streams && model != tc.model) {
			t.Errorf("%d %.60s: %q %v, want %q %v", tc.shape, tc.body, model, streams, tc.model, tc.streams)
		}
	}
}

func TestText(t *testing.T) {
	for st, want := range map[State]string{
		{Cause: "an image job", Waited: 12500 * time.Millisecond}:                                                  "waiting for the GPU: an image job is running (12 s so far)",
		{Cause: "an external hold", Waited: 3 * time.Second}:                                                       "waiting for the GPU: an external hold is in place (3 s so far)",
		{Cause: "an image job", Waited: 12 * time.Second, Admitted: true}:                                          "waited 12 s for the GPU: an image job",
		{Cause: memoryPrefix + "too little free video memory for qwen3:8b", Waited: 2 * time.Second}:               "waiting for video memory: too little free video memory for qwen3:8b (2 s so far)",
		{Cause: memoryPrefix + "x", Waited: 4 * time.Second, Admitted: true}:                                       "waited 4 s for video memory",
		{Cause: "an image job", Waited: time.Second, Position: 2}:                                                  "waiting for the GPU: an image job is running (1 s so far; 2nd in line)",
		{Cause: "an image job", Waited: time.Second, Position: 1, Known: true, Expected: 39200 * time.Millisecond}: "waiting for the GPU: an image job is running (1 s so far; 1st in line, expected to start in about 40 s)",
		{Cause: "an image job", Position: 3, Known: true, Expected: 150 * time.Second}:                             "waiting for the GPU: an image job is running (0 s so far; 3rd in line, expected to start in about 3 min)",
	} {
		if got := Text(st); got != want {
			t.Errorf("%+v: %q, want %q", st, got, want)
		}
	}
}

// source is a GPU that never changes.
type source struct{}

func (source) Changed() <-chan struct{}                { return make(chan struct{}) }
func (source) WaitCause() string                       { return "an image job" }
func (source) WaitOutlook() (int, time.Duration, bool) { return 0, 0, false }

// A refusal after the head is the stream's last chunk, in the API's
// error shape; the refusal's own head goes nowhere.
func TestRefusalAfterTheHead(t *testing.T) {
	for shape, want := range map[Shape]string{
		OllamaChat: `{"error":"busy"}` + "\n",
		OpenAI:     `data: {"error":{"message":"busy","type":"server_error"}}` + "\n\n",
	} {
		rec := httptest.NewRecorder()
		n := Start(rec, shape, []byte(`{"model":"m","stream":true}`), time.Hour, source{}, time.Now())
		n.Waited(false)
		w := n.Writer()
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"message":"busy","type":"server_error"}}`))
		if err := n.Finish(nil); err != nil {
			t.Fatal(err)
		}
		body := rec.Body.String()
		if rec.Code != 200 || rec.Header().Get("Retry-After") != "" || !strings.HasSuffix(body, want) || !strings.Contains(body, "waiting for the GPU") {
			t.Errorf("%d: %d %v %q", shape, rec.Code, rec.Header(), body)
		}
	}
}

// Once admitted, the engine's stream follows the notices as it is, its
// head swallowed; the notices are the API's chunks.
func TestEngineStreamFollows(t *testing.T) {
	rec := httptest.NewRecorder()
	n := Start(rec, OllamaGenerate, []byte(`{"model":"m"}`), time.Hour, source{}, time.Now().Add(-2*time.Second))
	n.Waited(true)
	w := n.Writer()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "3")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(`{"response":"a","done":true}` + "\n"))
	n.Finish(nil)
	lines := strings.Split(strings.TrimSpace(rec.Body.String()), "\n")
	if len(lines) != 3 || rec.Header().Get("Content-Type") != "application/x-ndjson" || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("%v %q", rec.Header(), rec.Body.String())
	}
	var first, second map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first["model"] != "m" || first["response"] != "" || first["done"] != false || first["thinking"] != "waiting for the GPU: an image job is running (2 s so far)" ||
		second["thinking"] != "waited 2 s for the GPU: an image job" || lines[2] != `{"response":"a","done":true}` {
		t.Fatalf("%q", rec.Body.String())
	}
}
