package admit

import (
	"context"
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// CaptureWriter passes a response through unchanged and unbuffered while
// keeping a copy of its first limit bytes and its status, so the image path
// can read prompt_id. Flush, Hijack and Unwrap come from the wrapper.
type CaptureWriter struct {
	*caddyhttp.ResponseWriterWrapper
	limit   int
	status  int
	body    []byte
	written bool
}

// NewCaptureWriter wraps w, keeping the first limit bytes of the answer.
func NewCaptureWriter(w http.ResponseWriter, limit int64) *CaptureWriter {
	return &CaptureWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, limit: int(limit)}
}

// Status is the answer's status, 0 before it has begun.
func (cw *CaptureWriter) Status() int { return cw.status }

// Body is the first limit bytes of the answer.
func (cw *CaptureWriter) Body() []byte { return cw.body }

// WriteHeader passes status on, and keeps the first final one.
func (cw *CaptureWriter) WriteHeader(status int) {
	if status >= 200 && !cw.written {
		cw.status, cw.written = status, true
	}
	cw.ResponseWriterWrapper.WriteHeader(status)
}

// Write passes p on, and keeps what of it fits within the limit.
func (cw *CaptureWriter) Write(p []byte) (int, error) {
	if !cw.written {
		cw.status, cw.written = http.StatusOK, true
	}
	if room := cw.limit - len(cw.body); room > 0 {
		cw.body = append(cw.body, p[:min(room, len(p))]...)
	}
	return cw.ResponseWriterWrapper.Write(p)
}

// ReadFrom keeps io.Copy from going around Write.
func (cw *CaptureWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{cw}, r)
}

type writerOnly struct{ io.Writer }

// Forward is the forward of an image job (gpu.ImageRun.Forward): it
// calls next under ctx, and fills f with what the engine answered, the
// status and the job's id that jobID reads within its first captureLimit
// bytes (none if jobID is nil: a synchronous engine), even if next panics
// (reverse_proxy aborts on a client gone mid-answer).
func Forward(ctx context.Context, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, f *gpu.Forwarded, captureLimit int64, jobID func([]byte) (string, bool)) {
	cw := NewCaptureWriter(w, captureLimit)
	defer func() {
		f.Status = cw.status
		if jobID != nil {
			f.PromptID, _ = jobID(cw.body)
		}
	}()
	f.Err = next.ServeHTTP(cw, r.WithContext(ctx))
}
