package proctest

import "net/http"

// hopHeaders are the headers of one connection, not forwarded.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade"}

// forwarder sends each request to the backend as it came and streams the
// answer back as it arrives; an answer cut after it began just ends (its
// chunked body closed normally), one cut before is a 502 with no body, as
// llama-swap's proxy does.
type forwarder struct {
	backend   string
	transport *http.Transport
}

func newForwarder(backend string) *forwarder {
	return &forwarder{backend: backend, transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = "http", f.backend
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := f.transport.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return // the end, or a cut: either way the answer ends here
		}
	}
}
