package turnstile

import (
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// trickled is what a client that trickles a chunked body saw.
type trickled struct {
	answered bool // an answer came (else the connection closed first, or nothing came)
	status   int
	header   http.Header
	body     string
	// sending: the answer came while the body was still being sent.
	sending bool
	// closeAsked: the answer said Connection: close.
	closeAsked bool
	// closed: the server closed the connection after the answer.
	closed bool
}

// trickle posts a chunked body that never ends in time: its head, then
// one byte every 50 ms for 30 s. It reads the answer, if one comes within
// 20 s, while the body still trickles, then whether the server closes the
// connection.
func trickle(t *testing.T, base, path, head string) trickled {
	t.Helper()
	u, _ := url.Parse(base)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", path, u.Host)
	stop, finished := make(chan struct{}), make(chan struct{})
	sender := make(chan struct{})
	go func() {
		defer close(sender)
		for i := 0; i < 600; i++ {
			piece := "a"
			if i == 0 {
				piece = head
			}
			if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(piece), piece); err != nil {
				return // the server closed the connection
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		close(finished)
	}()
	defer func() { close(stop); <-sender }()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	var out trickled
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		if rerr != nil {
			t.Fatalf("reading the answer: %v", rerr)
		}
		out = trickled{answered: true, status: resp.StatusCode, header: resp.Header, body: string(b), closeAsked: resp.Close}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = br.ReadByte()
	}
	select {
	case <-finished:
	default:
		out.sending = true
	}
	out.closed = err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	return out
}

// TestTrickledBodyIsAnsweredAtTheWaitTimeout: the wait counts from the
// request's arrival, its body's arrival included. A body trickled during
// a hold, which Caddy's idle read timeout never stops, is answered busy
// at llm_wait_timeout (image_wait_timeout for a prompt) while it still
// trickles, in its API's shape, on a connection then closed; nothing
// reaches the engine and the wait budget is given back.
func TestTrickledBodyIsAnsweredAtTheWaitTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, path, head, shape string
	}{
		{"chat", "/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"`, `"error":"gpu_turnstile: waited 500ms`},
		{"prompt", "/prompt", `{"client_id":"browser","prompt":{"3":{"class_type":"KSampler","inputs":{"seed":1}},"9":{"class_type":"SaveImage","inputs":{"text":"`, `"node_errors":{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{settings: "llm_wait_timeout 500ms\nimage_wait_timeout 500ms"})
			hold := h.takeHold(t, "test", "1m")
			base := h.llm
			if tc.path == "/prompt" {
				base = h.image
			}
			r := trickle(t, base, tc.path, tc.head)
			if !r.answered {
				t.Fatal("no answer while the body trickled")
			}
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, tc.shape) {
				t.Fatalf("got %d Retry-After %q %s, want 503 busy with %s", r.status, r.header.Get("Retry-After"), r.body, tc.shape)
			}
			if !r.sending {
				t.Fatal("answered only once the body had ended")
			}
			if !r.closeAsked || !r.closed {
				t.Fatalf("Connection: close %v, closed %v: the connection must close after the answer", r.closeAsked, r.closed)
			}
			st := h.waitStatus("the waiter gone", func(st Status) bool { return st.LLMWaiting == 0 && st.ImageWaiting == 0 })
			if st.WaitBuffer.Bytes != 0 {
				t.Fatalf("%d body bytes still held after the answer", st.WaitBuffer.Bytes)
			}
			if h.ollama.Requests() != 0 || h.comfy.Prompts() != 0 {
				t.Fatalf("the trickled request reached an engine (ollama %d, comfy %d)", h.ollama.Requests(), h.comfy.Prompts())
			}
			h.releaseHold(t, hold)
			h.waitIdle()
		})
	}
}

// TestImageWaitTimeout: an image job waiting behind a hold is answered
// 503 at image_wait_timeout in its engine's error shape, with
// Retry-After; nothing reaches the engine.
func TestImageWaitTimeout(t *testing.T) {
	t.Run("comfyui", func(t *testing.T) {
		h := newHarness(t, harnessOptions{settings: "image_wait_timeout 400ms\nbusy_retry_after 7s"})
		hold := h.takeHold(t, "test", "1m")
		r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
		var e struct {
			Error      struct{ Type, Message string }
			NodeErrors map[string]any `json:"node_errors"`
		}
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "7" ||
			json.Unmarshal([]byte(r.body), &e) != nil || e.Error.Type != "gpu_busy" || e.NodeErrors == nil ||
			!strings.Contains(e.Error.Message, "image_wait_timeout") {
			t.Fatalf("got %d Retry-After %q %s, want 503 in ComfyUI's shape naming image_wait_timeout", r.status, r.header.Get("Retry-After"), r.body)
		}
		if h.comfy.Prompts() != 0 {
			t.Fatal("the prompt reached ComfyUI")
		}
		h.releaseHold(t, hold)
		h.waitIdle()
	})
	t.Run("a1111", func(t *testing.T) {
		m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"}, settings: "image_wait_timeout 400ms"})
		hold := m.takeHold(t, "test", "1m")
		r := m.post(context.Background(), m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody())
		var e struct{ Error, Detail string }
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			json.Unmarshal([]byte(r.body), &e) != nil || e.Error != "GPUBusy" || !strings.Contains(e.Detail, "image_wait_timeout") {
			t.Fatalf("got %d Retry-After %q %s, want 503 in A1111's shape naming image_wait_timeout", r.status, r.header.Get("Retry-After"), r.body)
		}
		if m.a1111.Jobs() != 0 {
			t.Fatal("the job reached A1111")
		}
		m.releaseHold(t, hold)
		m.waitIdle()
	})
}

// TestHoldWaitTimeout: a hold request waits no longer than its
// "wait_timeout" (default image_wait_timeout): then 503, and no hold is
// taken.
func TestHoldWaitTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "image_wait_timeout 300ms"})
	first := h.takeHold(t, "first", "1m")
	for _, body := range []string{
		`{"turnstile":"default","owner":"second","wait_timeout":"200ms"}`,
		`{"turnstile":"default","owner":"second","wait_timeout":0.2}`,
		`{"turnstile":"default","owner":"second"}`, // image_wait_timeout
	} {
		r := h.post(context.Background(), h.admin+"/gpu_turnstile/holds", body)
		var e struct{ Error string }
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Error, "wait_timeout") {
			t.Fatalf("%s: got %d Retry-After %q %s, want 503 naming wait_timeout", body, r.status, r.header.Get("Retry-After"), r.body)
		}
		if st := h.status(); len(st.Holds) != 1 || st.Holds[0].ID != first || st.HoldWaiting != 0 {
			t.Fatalf("%s: holds %+v, %d waiting; want only the first", body, st.Holds, st.HoldWaiting)
		}
	}
	r := h.post(context.Background(), h.admin+"/gpu_turnstile/holds", `{"turnstile":"default","owner":"x","wait_timeout":"soon"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "wait_timeout") {
		t.Fatalf("a bad wait_timeout: %d %s, want 400 naming it", r.status, r.body)
	}
	h.releaseHold(t, first)
	h.waitIdle()
	h.releaseHold(t, h.takeHold(t, "after", "1m")) // the GPU free, a hold is had at once
}

// TestImageWaitTimeoutSettings: image_wait_timeout in the Caddyfile and
// in JSON, with the same checks, and its default.
func TestImageWaitTimeoutSettings(t *testing.T) {
	cfg, err := adapt(t, "{\n\tgpu_turnstile {\n\t\tcomfy http://127.0.0.1:8189\n\t\timage_wait_timeout 45m\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	if js := jsonString(t, cfg); !strings.Contains(js, `"image_wait_timeout":2700000000000`) {
		t.Fatalf("adapted %s, want image_wait_timeout in nanoseconds", js)
	}
	for _, v := range []string{"soon", "-5m", "0s", "1m 2m"} {
		_, err := adapt(t, "{\n\tgpu_turnstile {\n\t\tcomfy http://127.0.0.1:8189\n\t\timage_wait_timeout "+v+"\n\t}\n}")
		if err == nil || !strings.Contains(err.Error(), "image_wait_timeout") || !strings.Contains(err.Error(), "Caddyfile:4") {
			t.Errorf("image_wait_timeout %s: %v, want an error naming the option and line 4", v, err)
		}
	}
	if _, err := tcfg.Validate(Settings{Shorthands: map[string]string{"comfy": "http://127.0.0.1:8189"}, ImageWaitTimeout: -1}); err == nil || !strings.Contains(err.Error(), "image_wait_timeout") {
		t.Errorf("a negative image_wait_timeout in JSON: %v, want an error naming it", err)
	}
	c, err := tcfg.Validate(Settings{Shorthands: map[string]string{"comfy": "http://127.0.0.1:8189"}})
	if err != nil || c.ImageWait != 30*time.Minute {
		t.Fatalf("default image_wait_timeout %v (%v), want 30m", c.ImageWait, err)
	}
}

// TestTrickledBodyOverHTTP2: over HTTP/2 (h2c) too, a body trickled
// during a hold is answered busy at llm_wait_timeout while it still
// trickles (the stream's read is cut), and nothing reaches Ollama.
func TestTrickledBodyOverHTTP2(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "llm_wait_timeout 500ms", edit: func(cf string) string {
		return strings.Replace(cf, "auto_https off\n", "auto_https off\n\tservers {\n\t\tprotocols h1 h2c\n\t}\n", 1)
	}})
	hold := h.takeHold(t, "test", "1m")
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	pr, pw := io.Pipe()
	// sent is closed only once the whole body has gone; the client's
	// transport may close the body (and end the sender) on the answer.
	stop, sender, sent := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sender)
		defer pw.Close()
		io.WriteString(pw, `{"model":"llama3.2","messages":[{"role":"user","content":"`)
		for i := 0; i < 600; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := io.WriteString(pw, "a"); err != nil {
				return
			}
		}
		close(sent)
	}()
	defer func() { close(stop); pr.Close(); <-sender }()
	req, _ := http.NewRequest(http.MethodPost, h.llm+"/api/chat", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no answer while the body trickled: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "waited 500ms") {
		t.Fatalf("HTTP/%d %d %s, want HTTP/2 503 busy", resp.ProtoMajor, resp.StatusCode, b)
	}
	select {
	case <-sent:
		t.Fatal("answered only once the body had ended")
	default:
	}
	st := h.waitStatus("the waiter gone", func(st Status) bool { return st.LLMWaiting == 0 })
	if st.WaitBuffer.Bytes != 0 || h.ollama.Requests() != 0 {
		t.Fatalf("after the answer: %d body bytes held, %d requests reached Ollama", st.WaitBuffer.Bytes, h.ollama.Requests())
	}
	h.releaseHold(t, hold)
	h.waitIdle()
}

// TestTrickledRefusedBodyIsDrainedUntilTheWaitTimeout: a request turned
// away by max_waiting has the rest of its body read and dropped before the
// busy answer, but no longer than its wait would have lasted: a trickled
// body is answered at llm_wait_timeout, on a connection then closed.
func TestTrickledRefusedBodyIsDrainedUntilTheWaitTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "max_waiting 1\nllm_wait_timeout 1s"})
	hold := h.takeHold(t, "test", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("one chat waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	r := trickle(t, h.llm, "/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"`)
	if !r.answered || r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "max_waiting") {
		t.Fatalf("answered %v: %d %s, want 503 naming max_waiting", r.answered, r.status, r.body)
	}
	if !r.sending || !r.closeAsked || !r.closed {
		t.Fatalf("still sending %v, Connection: close %v, closed %v; want the answer while the body trickles, then the connection closed", r.sending, r.closeAsked, r.closed)
	}
	cancel()
	<-waiting
	h.releaseHold(t, hold)
	h.waitIdle()
}
