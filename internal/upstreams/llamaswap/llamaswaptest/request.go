package llamaswaptest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// maxMultipart is llama-swap's limit for a multipart form held in memory.
const maxMultipart = 32 << 20

// requestModel reads the model id as llama-swap does: from ?model= on GET;
// from the JSON body's "model" only when Content-Type says
// application/json; otherwise from the form (which includes the query). A
// JSON body sent without that Content-Type names no model. The body is
// left in place for the process.
func requestModel(r *http.Request) string {
	if r.Method == http.MethodGet {
		return r.URL.Query().Get("model")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return ""
	}
	defer func() { r.Body = io.NopCloser(bytes.NewReader(body)) }()
	ct := r.Header.Get("Content-Type")
	if strings.Contains(ct, "application/json") {
		var v struct {
			Model json.RawMessage `json:"model"`
		}
		if json.Unmarshal(body, &v) != nil {
			return ""
		}
		return jsonText(v.Model)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if strings.Contains(ct, "multipart/form-data") {
		if r.ParseMultipartForm(maxMultipart) != nil {
			return ""
		}
	} else if r.ParseForm() != nil {
		return ""
	}
	return r.FormValue("model")
}

// jsonText is a JSON value as gjson's String gives it: a string's text,
// any other value's JSON, "" for null or nothing.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if t := strings.TrimSpace(string(raw)); t != "null" {
		return t
	}
	return ""
}

// wantsStream reports whether a JSON body asks for "stream": true.
func wantsStream(body []byte) bool {
	var v struct {
		Stream bool `json:"stream"`
	}
	json.Unmarshal(body, &v)
	return v.Stream
}
