package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

func statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Shows each turnstile's state, job, holds and waiters",
		Args:  cobra.NoArgs,
	}
}

func runStatus(e *env, fl caddycmd.Flags) (int, error) {
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	data, err := c.do(http.MethodGet, "/gpu_turnstile/status", nil)
	if err != nil {
		return fail(e, fl, err)
	}
	var all struct {
		Turnstiles map[string]gpu.Status `json:"turnstiles"`
	}
	if err := decode(data, &all); err != nil {
		return ExitError, err
	}
	name := fl.String("turnstile")
	if name != "" {
		st, ok := all.Turnstiles[name]
		if !ok {
			return ExitNotFound, fmt.Errorf("no turnstile named %q", name)
		}
		all.Turnstiles = map[string]gpu.Status{name: st}
	}
	if fl.Bool("json") {
		printJSON(e.out, data)
		return ExitOK, nil
	}
	names := make([]string, 0, len(all.Turnstiles))
	for n := range all.Turnstiles {
		names = append(names, n)
	}
	slices.Sort(names)
	now := time.Now()
	for _, n := range names {
		writeStatus(e.out, n, all.Turnstiles[n], now)
	}
	return ExitOK, nil
}

// writeStatus writes one turnstile's status for a person.
func writeStatus(w io.Writer, name string, st gpu.Status, now time.Time) {
	fmt.Fprintf(w, "%s: %s for %s", name, st.State, age(now, st.Since))
	if st.LLMInflight > 0 {
		fmt.Fprintf(w, ", %d LLM request(s) in flight", st.LLMInflight)
	}
	if st.ImagePending {
		fmt.Fprint(w, ", image job pending")
	}
	fmt.Fprintln(w)
	if j := st.Job; j != nil {
		fmt.Fprintf(w, "  job      %s on %s, %s, %s\n", or(j.PromptID, "(no id yet)"), or(j.Engine, "?"), j.Phase, age(now, j.Started))
	}
	for _, h := range st.Holds {
		until := "while its condition lasts"
		if !h.ExpiresAt.IsZero() {
			until = "expires in " + h.ExpiresAt.Sub(now).Round(time.Second).String()
		}
		fmt.Fprintf(w, "  hold     %s  %s (%s), %s\n", h.ID, h.Owner, h.Source, until)
	}
	for _, p := range st.Presence {
		fmt.Fprintf(w, "  presence %s: %s\n", p.Condition, presence(p))
	}
	for _, wt := range st.Waiters {
		what := strings.TrimSpace(wt.Path + " " + wt.Model + " " + wt.Owner)
		fmt.Fprintf(w, "  waiting  %s %s for %s\n", wt.Kind, what, age(now, wt.Since))
	}
	for _, en := range st.Engines {
		fmt.Fprintf(w, "  engine   %s (%s, %s) %s %s\n", en.Name, en.Kind, en.Class, en.URL, reach(en.Reachable))
	}
}

// presence says how a hold_while condition stands.
func presence(p gpu.PresenceStatus) string {
	switch {
	case p.Error != "":
		return "error: " + p.Error
	case p.Engaged:
		return "engaged by " + p.Owner
	}
	return "clear"
}

func reach(r *bool) string {
	switch {
	case r == nil:
		return "not contacted yet"
	case *r:
		return "reachable"
	}
	return "UNREACHABLE"
}

func age(now, since time.Time) string {
	if since.IsZero() {
		return "?"
	}
	return now.Sub(since).Round(time.Second).String()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fail reports err: with --json an error answer's body goes to stdout as
// sent; the exit code follows the answer's status.
func fail(e *env, fl caddycmd.Flags, err error) (int, error) {
	var ae *answerError
	if fl.Bool("json") && errors.As(err, &ae) {
		printJSON(e.out, ae.Body)
	}
	return code(err), err
}
