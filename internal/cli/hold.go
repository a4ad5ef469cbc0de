package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

func holdCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hold [--owner NAME] [--ttl D] [--no-wait] [--wait-for PID | -- COMMAND ARGS...]",
		Short: "Takes the GPU for something else (a game, a render, a benchmark)",
		Long: `Takes the GPU once LLM requests have drained and every engine is empty,
and prints the hold's ID. The hold ends when its ttl runs out unless it is
renewed ("renew ID") or released first ("release ID").

With --wait-for PID, or with -- COMMAND ARGS..., the hold is kept (renewed
every ttl/3) while the process runs and released when it ends; with a
COMMAND, this exits with the command's status.`,
	}
	f := cmd.Flags()
	f.String("owner", "cli", "Who holds the GPU, as the status shows it")
	f.String("ttl", "", "How long the hold lasts unless renewed, e.g. 2h (default 5m)")
	f.Bool("no-wait", false, "Do not wait: exit 3 if the GPU cannot be held at once")
	f.String("wait-timeout", "", "The longest wait for the GPU (default: the turnstile's image_wait_timeout)")
	f.Int("wait-for", 0, "Hold while the process with this PID runs")
	return cmd
}

func renewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "renew ID",
		Short: "Extends a hold by its ttl (or --ttl)",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().String("ttl", "", "The new ttl from now (default: the hold's own)")
	return cmd
}

func releaseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "release ID",
		Short: "Ends a hold; the GPU goes back to the engines",
		Args:  cobra.ExactArgs(1),
	}
}

// holdBody is a POST /gpu_turnstile/holds body from the flags.
func holdBody(fl caddycmd.Flags) (map[string]any, error) {
	body := map[string]any{"owner": fl.String("owner")}
	if t := fl.String("turnstile"); t != "" {
		body["turnstile"] = t
	}
	for flag, field := range map[string]string{"ttl": "ttl", "wait-timeout": "wait_timeout"} {
		if v := fl.String(flag); v != "" {
			if _, err := caddy.ParseDuration(v); err != nil {
				return nil, fmt.Errorf("--%s %q: want a duration such as 90s or 2h", flag, v)
			}
			body[field] = v
		}
	}
	if fl.Bool("no-wait") {
		body["wait"] = false
	}
	return body, nil
}

func runHold(e *env, fl caddycmd.Flags) (int, error) {
	body, err := holdBody(fl)
	if err != nil {
		return ExitError, err
	}
	command := commandArgs(fl)
	pid := fl.Int("wait-for")
	if pid != 0 && len(command) > 0 {
		return ExitError, fmt.Errorf("give --wait-for PID or -- COMMAND, not both")
	}
	if len(command) == 0 && len(fl.Args()) > 0 {
		return ExitError, fmt.Errorf("unexpected arguments %q: a command to run goes after --", fl.Args())
	}
	if pid != 0 {
		if err := checkRunning(e.ctx, pid); err != nil {
			return ExitError, err
		}
	}
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	stop := func() {}
	if !fl.Bool("json") {
		stop = sayWaiting(e)
	}
	h, data, err := take(c, body)
	stop()
	if err != nil {
		return fail(e, fl, err)
	}
	if fl.Bool("json") {
		printJSON(e.out, data)
	} else {
		fmt.Fprintln(e.out, h.ID)
		fmt.Fprintf(e.errOut, "held for %s; expires at %s unless renewed\n", h.Owner, h.ExpiresAt.Local().Format(time.TimeOnly))
	}
	if pid == 0 && len(command) == 0 {
		return ExitOK, nil
	}
	s := &supervisor{e: e, c: c, hold: h, ttl: fl.String("ttl")}
	if pid != 0 {
		return s.whileProcess(pid)
	}
	return s.whileCommand(command)
}

// waitingNote is how long a hold may take before the command says that
// it waits, so that a person at the terminal knows it is not stuck.
const waitingNote = time.Second

// sayWaiting writes to stderr, once waitingNote has passed, that the
// hold waits; the func it returns stops it and returns once it has.
func sayWaiting(e *env) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTimer(waitingNote)
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintln(e.errOut, "waiting for the GPU: LLM requests drain, a running image job ends, the engines are emptied...")
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// commandArgs are the arguments after "--", if any.
func commandArgs(fl caddycmd.Flags) []string {
	at := fl.ArgsLenAtDash()
	if at < 0 {
		return nil
	}
	return fl.Args()[at:]
}

// take asks for the hold and waits for the answer.
func take(c *client, body map[string]any) (gpu.HoldStatus, []byte, error) {
	var h gpu.HoldStatus
	data, err := c.wait(http.MethodPost, "/gpu_turnstile/holds", body)
	if err != nil {
		return h, nil, err
	}
	return h, data, decode(data, &h)
}

func runRenew(e *env, fl caddycmd.Flags) (int, error) {
	var body map[string]any
	if v := fl.String("ttl"); v != "" {
		if _, err := caddy.ParseDuration(v); err != nil {
			return ExitError, fmt.Errorf("--ttl %q: want a duration such as 90s or 2h", v)
		}
		body = map[string]any{"ttl": v}
	}
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	data, err := renew(c, fl.Arg(0), body)
	if err != nil {
		return fail(e, fl, err)
	}
	return report(e, fl, data, "renewed")
}

func renew(c *client, id string, body map[string]any) ([]byte, error) {
	return c.do(http.MethodPost, "/gpu_turnstile/holds/"+url.PathEscape(id)+"/renew", body)
}

func release(c *client, id string) ([]byte, error) {
	return c.do(http.MethodDelete, "/gpu_turnstile/holds/"+url.PathEscape(id), nil)
}

func runRelease(e *env, fl caddycmd.Flags) (int, error) {
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	data, err := release(c, fl.Arg(0))
	if err != nil {
		return fail(e, fl, err)
	}
	return report(e, fl, data, "released")
}

// report prints a hold's answer: as sent with --json, else what was done.
func report(e *env, fl caddycmd.Flags, data []byte, done string) (int, error) {
	if fl.Bool("json") {
		printJSON(e.out, data)
		return ExitOK, nil
	}
	var h gpu.HoldStatus
	if err := decode(data, &h); err != nil {
		return ExitError, err
	}
	if h.ExpiresAt.IsZero() {
		fmt.Fprintf(e.out, "%s %s\n", done, h.ID)
	} else {
		fmt.Fprintf(e.out, "%s %s; expires at %s\n", done, h.ID, h.ExpiresAt.Local().Format(time.TimeOnly))
	}
	return ExitOK, nil
}
