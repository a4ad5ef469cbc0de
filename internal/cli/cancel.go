package cli

import (
	"fmt"
	"net/http"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func cancelCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel [--force]",
		Short: "Stops the running image job; answers once its engine has stopped it",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().Bool("force", false, "Abandon the job: hand the GPU on without waiting for its end")
	return cmd
}

func runCancel(e *env, fl caddycmd.Flags) (int, error) {
	c, err := newClient(fl)
	if err != nil {
		return ExitError, err
	}
	var force []string
	if fl.Bool("force") {
		force = []string{"force", "1"}
	}
	data, err := c.wait(http.MethodDelete, withTurnstile("/gpu_turnstile/job", fl.String("turnstile"), force...), nil)
	if err != nil {
		return fail(e, fl, err)
	}
	if fl.Bool("json") {
		printJSON(e.out, data)
		return ExitOK, nil
	}
	var res struct {
		PromptID string `json:"prompt_id"`
		Outcome  string `json:"outcome"`
	}
	if err := decode(data, &res); err != nil {
		return ExitError, err
	}
	fmt.Fprintf(e.out, "%s: %s\n", or(res.PromptID, "job"), res.Outcome)
	return ExitOK, nil
}
