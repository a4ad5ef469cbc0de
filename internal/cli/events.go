package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// reconnectAfter is how soon a stream that the server ended (a reload
// replaces the admin endpoint) is opened again.
const reconnectAfter = 2 * time.Second

func eventsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "events",
		Short: "Follows a turnstile's live events (status, step, job) until interrupted",
		Long: `Prints the turnstile's status at once and on every change, each timed
step (unload, free, warm) and each image job's end. With --json, one JSON
object a line: {"event":"status","data":{...}}. A config reload ends the
admin endpoint's streams; this opens it again.`,
		Args: cobra.NoArgs,
	}
}

func runEvents(e *env, fl caddycmd.Flags) (int, error) {
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	path := withTurnstile("/gpu_turnstile/events", fl.String("turnstile"))
	for {
		resp, err := c.open(http.MethodGet, path, nil)
		if err != nil {
			return fail(e, fl, err)
		}
		follow(e, resp.Body, fl.Bool("json"))
		if e.ctx.Err() != nil {
			return ExitOK, nil
		}
		select {
		case <-time.After(reconnectAfter):
		case <-e.ctx.Done():
			return ExitOK, nil
		}
	}
}

// follow prints the events of one stream until it ends or the context
// does.
func follow(e *env, body io.ReadCloser, asJSON bool) {
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-e.ctx.Done():
		case <-stop:
		}
		body.Close()
	}()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			printEvent(e.out, name, []byte(strings.TrimPrefix(line, "data: ")), asJSON)
		}
	}
}

// printEvent writes one event: a JSON line, or a line for a person.
func printEvent(w io.Writer, name string, data []byte, asJSON bool) {
	if asJSON {
		line, err := json.Marshal(struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}{name, data})
		if err == nil {
			fmt.Fprintln(w, string(line))
		}
		return
	}
	now := time.Now().Format(time.TimeOnly)
	if name != "status" {
		fmt.Fprintf(w, "%s %-6s %s\n", now, name, data)
		return
	}
	var st gpu.Status
	if json.Unmarshal(data, &st) != nil {
		fmt.Fprintf(w, "%s %-6s %s\n", now, name, data)
		return
	}
	fmt.Fprintf(w, "%s %-6s %s, %d LLM in flight, image pending %v, %d waiting, %d hold(s)\n",
		now, name, st.State, st.LLMInflight, st.ImagePending, len(st.Waiters), len(st.Holds))
}
