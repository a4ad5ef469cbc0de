package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// Command is `caddy gpu-turnstile`, for caddycmd.RegisterCommand.
func Command() caddycmd.Command {
	return caddycmd.Command{
		Name:      "gpu-turnstile",
		Usage:     "status|hold|renew|release|cancel|events [flags]",
		Short:     "Shows and steers the GPU turnstiles of a running Caddy",
		Long:      long(),
		CobraFunc: populate,
	}
}

// runE runs a subcommand as Caddy runs its own: a signal ends its
// context, and its exit code reaches caddycmd.Main.
func runE(f runFunc) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		e := &env{ctx: ctx, out: c.OutOrStdout(), errOut: c.ErrOrStderr()}
		return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
			return f(e, fl)
		})(c, args)
	}
}

// env is what a subcommand writes to and stops on.
type env struct {
	ctx         context.Context
	out, errOut io.Writer
}

// runFunc is a subcommand: its exit code, and the error to report.
type runFunc func(e *env, fl caddycmd.Flags) (int, error)

// populate adds the flags every subcommand shares and the subcommands.
func populate(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.String("address", "", "The admin endpoint's address, if not the config's or localhost:2019")
	pf.StringP("config", "c", "", "A config file to read the admin address from, if --address is not given")
	pf.StringP("adapter", "a", "", "The config adapter of --config")
	pf.StringP("turnstile", "t", "", "The turnstile (default: the one named default)")
	pf.Bool("json", false, "Print the admin endpoint's JSON answers as they are")
	for _, sub := range []*cobra.Command{statusCommand(), holdCommand(), renewCommand(), releaseCommand(), cancelCommand(), eventsCommand()} {
		sub.RunE = runE(runs[sub.Name()])
		cmd.AddCommand(sub)
	}
}

// runs are the subcommands' functions, by name.
var runs = map[string]runFunc{
	"status":  runStatus,
	"hold":    runHold,
	"renew":   runRenew,
	"release": runRelease,
	"cancel":  runCancel,
	"events":  runEvents,
}

// long is the command's help: what it does, and the exit codes.
func long() string {
	var b strings.Builder
	b.WriteString(`Talks to the admin endpoint of a running Caddy with the gpu_turnstile
plugin, as "caddy reload" and "caddy stop" do: --address, else the admin
address in --config, else localhost:2019.

  caddy gpu-turnstile status
  caddy gpu-turnstile hold --owner steam --ttl 2h      (prints the hold's ID)
  caddy gpu-turnstile hold --owner game -- ./game.sh   (held while it runs)
  caddy gpu-turnstile renew ID [--ttl 2h]
  caddy gpu-turnstile release ID
  caddy gpu-turnstile cancel [--force]
  caddy gpu-turnstile events

Exit codes:
`)
	for _, c := range ExitCodes {
		fmt.Fprintf(&b, "  %d  %s\n", c.Code, c.Meaning)
	}
	b.WriteString("With -- COMMAND, hold exits with the command's own status once it ran.\n")
	return b.String()
}

// printJSON writes data (a JSON answer) on one line, as sent.
func printJSON(w io.Writer, data []byte) {
	fmt.Fprintln(w, strings.TrimSpace(string(data)))
}

// decode reads a JSON answer into v.
func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("the admin endpoint's answer is not what this command expects (%v): %.200s", err, data)
	}
	return nil
}
