package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// admitRequest records a model request on the timeline and admits it on
// its model (see use).
func (s *Server) admitRequest(r *http.Request, name string, keepAlive *time.Duration) (done func(), err error) {
	s.gpu.Mark("ollama", "request "+r.URL.Path+" "+name)
	return s.use(r.Context(), name, keepAlive)
}

// parseKeepAlive reads keep_alive as Ollama does: a number is seconds, a
// string is a Go duration; a bare "-1" string is an error.
func parseKeepAlive(raw json.RawMessage) (*time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err == nil {
		d := time.Duration(n * float64(time.Second))
		return &d, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return nil, fmt.Errorf("invalid keep_alive: %s", raw)
	}
	d, err := time.ParseDuration(str)
	if err != nil {
		return nil, fmt.Errorf("time: missing unit in duration %q", str)
	}
	return &d, nil
}
