package comfy

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Watcher keeps one websocket open to ComfyUI under its own client id and
// turns the status broadcasts (sent to every socket on every queue change)
// into a signal. It never uses a browser's client id: that would replace
// the browser's socket.
type Watcher struct {
	c        *Client
	clientID string
	initial  time.Duration
	max      time.Duration
	report   func(connected bool, err error)

	mu        sync.Mutex
	changed   chan struct{}
	connected bool
	remaining int
	known     bool
}

// NewWatcher returns a watcher that reconnects with exponential backoff
// from initial to max. report, if not nil, is told of every connect and
// disconnect (for logs).
func (c *Client) NewWatcher(clientID string, initial, max time.Duration, report func(connected bool, err error)) *Watcher {
	return &Watcher{c: c, clientID: clientID, initial: initial, max: max, report: report, changed: make(chan struct{})}
}

// Changed returns a channel that is closed at the next status broadcast or
// connection change.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Connected reports whether the socket is open now.
func (w *Watcher) Connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.connected
}

// QueueRemaining returns ComfyUI's last reported queue length (running
// plus pending); known is false until a status has arrived on the current
// connection.
func (w *Watcher) QueueRemaining() (n int, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.remaining, w.known
}

func (w *Watcher) signal(update func()) {
	w.mu.Lock()
	update()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// Run keeps the socket open until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	u, _ := url.Parse(w.c.URL() + "/ws")
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.RawQuery = url.Values{"clientId": {w.clientID}}.Encode()
	delay := w.initial
	for ctx.Err() == nil {
		start := time.Now()
		err := w.session(ctx, u.String())
		if ctx.Err() != nil {
			return
		}
		if w.report != nil {
			w.report(false, err)
		}
		if time.Since(start) > w.max {
			delay = w.initial // it had been up a while: a fresh failure
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, w.max)
	}
}

// session runs one websocket connection until it fails.
func (w *Watcher) session(ctx context.Context, addr string) error {
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, _, err := websocket.Dial(dialCtx, addr, &websocket.DialOptions{HTTPClient: w.c.hc, HTTPHeader: w.c.c.Header()})
	cancel()
	if err != nil {
		return err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(16 << 20) // preview images never come to this socket, but be generous
	w.signal(func() { w.connected = true; w.known = false })
	if w.report != nil {
		w.report(true, nil)
	}
	defer w.signal(func() { w.connected = false; w.known = false })
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			continue
		}
		var msg struct {
			Type string `json:"type"`
			Data struct {
				Status struct {
					ExecInfo struct {
						QueueRemaining *int `json:"queue_remaining"`
					} `json:"exec_info"`
				} `json:"status"`
			} `json:"data"`
		}
		if json.Unmarshal(data, &msg) != nil || msg.Type != "status" || msg.Data.Status.ExecInfo.QueueRemaining == nil {
			continue
		}
		n := *msg.Data.Status.ExecInfo.QueueRemaining
		w.signal(func() { w.remaining = n; w.known = true })
	}
}

// Outcome is how a job ended.
type Outcome string

// The outcomes of a job watch.
const (
	Success     Outcome = "success"
	Failed      Outcome = "error"
	Interrupted Outcome = "interrupted"
	Lost        Outcome = "lost" // in neither the queue nor history: ComfyUI restarted or died
)

// WaitJob returns when the job has a history entry, or is in neither the
// queue nor history (lost), or ComfyUI refuses connections (its process is
// gone, and with it the job and its memory), or ctx ends. It checks at
// every change w reports, and polls every poll as a fallback (every
// 5*poll while the websocket is up, as a safety net). w may be nil.
func (c *Client) WaitJob(ctx context.Context, promptID string, w *Watcher, poll time.Duration) (Outcome, error) {
	for {
		var changed <-chan struct{}
		interval := poll
		if w != nil {
			changed = w.Changed() // taken before the checks, so no change is missed
			if w.Connected() {
				interval = 5 * poll
			}
		}
		outcome, done, err := c.checkJob(ctx, promptID)
		if done {
			return outcome, nil
		}
		if err != nil && Refused(err) {
			return Lost, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				return "", errors.Join(ctx.Err(), err)
			}
			return "", ctx.Err()
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// checkJob looks the job up once: done with its outcome if finished or lost.
func (c *Client) checkJob(ctx context.Context, promptID string) (Outcome, bool, error) {
	st, found, err := c.History(ctx, promptID)
	if err != nil {
		return "", false, err
	}
	if found {
		return outcomeOf(st), true, nil
	}
	running, pending, err := c.Queue(ctx)
	if err != nil {
		return "", false, err
	}
	if slices.Contains(running, promptID) || slices.Contains(pending, promptID) {
		return "", false, nil
	}
	// It may have finished between the two reads.
	st, found, err = c.History(ctx, promptID)
	if err != nil {
		return "", false, err
	}
	if found {
		return outcomeOf(st), true, nil
	}
	return Lost, true, nil
}

func outcomeOf(st JobStatus) Outcome {
	switch {
	case st.Outcome == "execution_interrupted":
		return Interrupted
	case st.StatusStr == "error" || st.Outcome == "execution_error":
		return Failed
	}
	return Success
}

// WaitIdle returns when ComfyUI's queue is empty (nothing running or
// pending), when ComfyUI refuses connections, or when ctx ends. Like
// WaitJob it wakes at every change w reports and polls as a fallback.
func (c *Client) WaitIdle(ctx context.Context, w *Watcher, poll time.Duration) error {
	for {
		var changed <-chan struct{}
		interval := poll
		if w != nil {
			changed = w.Changed()
			if w.Connected() {
				interval = 5 * poll
			}
		}
		running, pending, err := c.Queue(ctx)
		switch {
		case err == nil && len(running)+len(pending) == 0:
			return nil
		case err != nil && Refused(err):
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// Interrupt stops a running job at its next node; a pending one is
// removed from the queue.
func (c *Client) Interrupt(ctx context.Context, promptID string) error {
	if err := c.do(ctx, "POST", "/queue", map[string][]string{"delete": {promptID}}, nil); err != nil {
		return err
	}
	return c.do(ctx, "POST", "/interrupt", map[string]string{"prompt_id": promptID}, nil)
}
