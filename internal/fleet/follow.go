package fleet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync/atomic"
	"time"
)

// Reconnection backoff of a Follower whose stream ended or failed.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// maxEventBytes bounds one line of the stream (a status JSON).
const maxEventBytes = 4 << 20

// Follower follows one host's status event stream, and keeps its last
// status as an immutable snapshot that Snapshot reads without waiting.
type Follower struct {
	url    string
	client *http.Client
	header http.Header
	pin    string

	host atomic.Pointer[Host]
	// seen is when the stream last said anything (a status, another
	// event or a keep-alive comment), in Unix nanoseconds; 0 while not
	// connected.
	seen atomic.Int64
	// sent is what this front sent there of which models.
	sent sent
	// most is the most models its status has listed at once.
	most atomic.Int32

	cancel context.CancelFunc
	done   chan struct{}
}

// NewFollower starts following the status event stream at url (the
// status_path of a host), through client, with header added to its
// requests. Destruct stops it.
func NewFollower(url string, client *http.Client, header http.Header, pinOf string) *Follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{url: url, client: client, header: header, pin: Pin(pinOf), cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

// Pin is the PinCookie value naming the upstream addr: a digest, so that
// the cookie does not show the hosts' addresses.
func Pin(addr string) string {
	sum := sha256.Sum256([]byte(addr))
	return hex.EncodeToString(sum[:8])
}

// Pin is the PinCookie value of the followed host.
func (f *Follower) Pin() string { return f.pin }

// Snapshot returns the host's last status, or nil when it is unknown: not
// yet seen, its stream lost, or silent for longer than stale (a stream
// that stalls is no news, and its last status may be long wrong).
func (f *Follower) Snapshot(now time.Time, stale time.Duration) *Host {
	seen := f.seen.Load()
	if seen == 0 || now.UnixNano()-seen > int64(stale) {
		return nil
	}
	return f.host.Load()
}

// Sending reports whether this front has a request for model in flight
// to the host, or had one a moment ago (settleFor): the model is loaded
// or loading there, even while its status does not list it yet.
func (f *Follower) Sending(model string, now time.Time) bool { return f.sent.has(model, now) }

// Capacity is the most models the host's status has listed at once: how
// many it can hold, as far as this front has seen.
func (f *Follower) Capacity() int { return int(f.most.Load()) }

// Destruct stops following, and waits for the stream to end.
func (f *Follower) Destruct() error {
	f.cancel()
	<-f.done
	return nil
}

// run keeps the stream connected until ctx ends: after a stream ends, it
// reconnects at once; after a failure, with a backoff doubling from
// minBackoff to maxBackoff, reset by a stream that delivered a status.
func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		got := f.stream(ctx)
		f.seen.Store(0)
		f.host.Store(nil)
		if got {
			backoff = minBackoff
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// stream reads one connection of the event stream to its end; got is
// true if it delivered a status.
func (f *Follower) stream(ctx context.Context) (got bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return false
	}
	for k, v := range f.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := f.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var event string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		f.seen.Store(time.Now().UnixNano())
		switch {
		case len(line) == 0:
			if event == "status" && len(data) > 0 {
				if h, err := ParseHost(data); err == nil {
					f.host.Store(h)
					if n := int32(len(h.Models)); n > f.most.Load() {
						f.most.Store(n)
					}
					got = true
				}
			}
			event, data = "", data[:0]
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		}
	}
	return got
}
