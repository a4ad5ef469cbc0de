package turnstile

import (
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// captureWriter passes a response through unchanged and unbuffered while
// keeping a copy of its first limit bytes and its status, so the image path
// can read prompt_id. Flush, Hijack and Unwrap come from the wrapper.
type captureWriter struct {
	*caddyhttp.ResponseWriterWrapper
	limit   int
	status  int
	body    []byte
	written bool
}

func newCaptureWriter(w http.ResponseWriter, limit int64) *captureWriter {
	return &captureWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, limit: int(limit)}
}

func (cw *captureWriter) WriteHeader(status int) {
	if status >= 200 && !cw.written {
		cw.status, cw.written = status, true
	}
	cw.ResponseWriterWrapper.WriteHeader(status)
}

func (cw *captureWriter) Write(p []byte) (int, error) {
	if !cw.written {
		cw.status, cw.written = http.StatusOK, true
	}
	if room := cw.limit - len(cw.body); room > 0 {
		cw.body = append(cw.body, p[:min(room, len(p))]...)
	}
	return cw.ResponseWriterWrapper.Write(p)
}

// ReadFrom keeps io.Copy from going around Write.
func (cw *captureWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{cw}, r)
}

type writerOnly struct{ io.Writer }

// ok reports a 2xx response.
func (cw *captureWriter) ok() bool { return cw.status >= 200 && cw.status < 300 }
