package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// client talks to one Caddy's admin endpoint.
type client struct {
	addr string
}

// newClient finds the admin endpoint as Caddy's own commands do: the
// --address flag, else the admin address of --config, else Caddy's
// default (localhost:2019).
func newClient(fl caddycmd.Flags) (*client, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin endpoint: %w", err)
	}
	return &client{addr: addr}, nil
}

// answerError is an admin endpoint's answer with an error status.
type answerError struct {
	Status  int
	Message string // the answer's "error", or its body
	Body    []byte // the answer as sent, for --json
}

func (e *answerError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// code is the exit code for err: that of an answer's status, or
// ExitError.
func code(err error) int {
	var ae *answerError
	if errors.As(err, &ae) {
		return exitFor(ae.Status)
	}
	return ExitError
}

// answerWithin bounds a request that the server answers at once (status,
// renew, release): a Caddy that accepts the connection and never answers
// does not keep the command waiting.
var answerWithin = 30 * time.Second

// do sends a request that is answered at once, within answerWithin, and
// returns the answer's body; an error status is an *answerError. body, if
// not nil, is sent as JSON.
func (c *client) do(method, path string, body any) ([]byte, error) {
	type answer struct {
		data []byte
		err  error
	}
	ch := make(chan answer, 1) // the request outlives a timeout; this process ends soon after
	go func() {
		data, err := c.wait(method, path, body)
		ch <- answer{data, err}
	}()
	t := time.NewTimer(answerWithin)
	defer t.Stop()
	select {
	case a := <-ch:
		return a.data, a.err
	case <-t.C:
		return nil, fmt.Errorf("admin endpoint %s: no answer to %s %s within %v", c.addr, method, path, answerWithin)
	}
}

// wait is do for a request whose wait the server bounds itself: a hold
// waits up to its wait_timeout, a cancel until the engine has stopped the
// job (or interrupt_grace).
func (c *client) wait(method, path string, body any) ([]byte, error) {
	resp, err := c.open(method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer to %s %s: %w", method, path, err)
	}
	return data, nil
}

// open sends a request and returns the open answer, for streams.
func (c *client) open(method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	resp, err := caddycmd.AdminAPIRequest(c.addr, method, path, nil, r)
	if err != nil {
		return nil, c.explain(err)
	}
	return resp, nil
}

// adminAnswer is how caddycmd.AdminAPIRequest reports an error status:
// the status and the answer's body are in its message.
var adminAnswer = regexp.MustCompile(`(?s)^caddy responded with error: HTTP (\d{3}): (.*)$`)

// explain turns AdminAPIRequest's error into an *answerError, or says
// what to check when the endpoint could not be reached.
func (c *client) explain(err error) error {
	m := adminAnswer.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("admin endpoint %s: %w (is Caddy running? give its admin address with --address, or its config with --config)", c.addr, err)
	}
	status, _ := strconv.Atoi(m[1])
	ae := &answerError{Status: status, Message: strings.TrimSpace(m[2]), Body: []byte(m[2])}
	var shaped struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(m[2]), &shaped) == nil && shaped.Error != "" {
		ae.Message = shaped.Error
	}
	if status == http.StatusNotFound && !strings.HasPrefix(ae.Message, "gpu_turnstile:") {
		// Caddy's own 404: the routes are not there.
		ae.Message += " (is this Caddy built with the gpu_turnstile plugin?)"
	}
	return ae
}

// withTurnstile adds ?turnstile=NAME to path when a name is given.
func withTurnstile(path, name string, more ...string) string {
	q := url.Values{}
	if name != "" {
		q.Set("turnstile", name)
	}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
