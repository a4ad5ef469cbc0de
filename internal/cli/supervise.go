package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// processPoll is how often --wait-for looks whether its process still
// runs.
const processPoll = time.Second

// supervisor keeps a hold while a process runs: it renews the hold every
// third of its ttl and releases it when the process ends (or a signal
// ends this command).
type supervisor struct {
	e    *env
	c    *client
	hold gpu.HoldStatus
	ttl  string // --ttl, if given
}

// whileProcess keeps the hold until the process pid ends.
func (s *supervisor) whileProcess(pid int) (int, error) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(processPoll)
		defer t.Stop()
		for {
			if ok, err := process.PidExistsWithContext(s.e.ctx, int32(pid)); err == nil && !ok {
				return
			}
			select {
			case <-t.C:
			case <-s.e.ctx.Done():
				return
			}
		}
	}()
	s.keep(ended)
	if err := s.e.ctx.Err(); err != nil {
		return ExitError, fmt.Errorf("interrupted before process %d ended; the hold is released", pid)
	}
	return ExitOK, nil
}

// whileCommand runs args, keeps the hold until it ends and exits with its
// status. A signal to this command is passed on to it.
func (s *supervisor) whileCommand(args []string) (int, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, s.e.out, s.e.errOut
	if err := cmd.Start(); err != nil {
		s.end()
		return ExitError, fmt.Errorf("starting %s: %w; the hold is released", args[0], err)
	}
	ended := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(ended)
	}()
	go stopOnSignal(s.e.ctx, cmd.Process, ended)
	s.keep(ended)
	<-ended
	var exit *exec.ExitError
	switch {
	case waitErr == nil:
		return ExitOK, nil
	case errors.As(waitErr, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), nil
	}
	return ExitError, fmt.Errorf("%s: %w", args[0], waitErr)
}

// killAfter is how long a command told to stop by a signal may take
// before it is killed.
const killAfter = 10 * time.Second

// stopOnSignal passes the end of ctx (a signal) on to p, and kills p if
// it has not ended killAfter later.
func stopOnSignal(ctx context.Context, p *os.Process, ended <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-ended:
		return
	}
	if p.Signal(os.Interrupt) != nil { // Windows has no interrupt to send
		p.Kill()
		return
	}
	t := time.NewTimer(killAfter)
	defer t.Stop()
	select {
	case <-t.C:
		p.Kill()
	case <-ended:
	}
}

// keep renews the hold until ended is closed or the context ends, then
// releases it.
func (s *supervisor) keep(ended <-chan struct{}) {
	defer s.end()
	t := time.NewTicker(s.renewEvery())
	defer t.Stop()
	for {
		select {
		case <-ended:
			return
		case <-s.e.ctx.Done():
			<-ended // the process is told to stop; the GPU is its until it has
			return
		case <-t.C:
			var body map[string]any
			if s.ttl != "" {
				body = map[string]any{"ttl": s.ttl}
			}
			if _, err := renew(s.c, s.hold.ID, body); err != nil {
				fmt.Fprintf(s.e.errOut, "warning: renewing hold %s: %v\n", s.hold.ID, err)
			}
		}
	}
}

// renewEvery is a third of the hold's lease, so that two renewals may
// fail before it runs out.
func (s *supervisor) renewEvery() time.Duration {
	lease := s.hold.ExpiresAt.Sub(s.hold.Since)
	if lease <= 0 {
		lease = gpu.DefaultHoldTTL
	}
	return max(lease/3, time.Second)
}

// end releases the hold; one that is already gone is fine.
func (s *supervisor) end() {
	if _, err := release(s.c, s.hold.ID); err != nil && code(err) != ExitNotFound {
		fmt.Fprintf(s.e.errOut, "warning: releasing hold %s: %v (it ends when its ttl runs out)\n", s.hold.ID, err)
	}
}

// checkRunning fails unless a process with this pid runs.
func checkRunning(ctx context.Context, pid int) error {
	ok, err := process.PidExistsWithContext(ctx, int32(pid))
	switch {
	case err != nil:
		return fmt.Errorf("--wait-for %d: %w", pid, err)
	case !ok:
		return fmt.Errorf("--wait-for %d: no such process", pid)
	}
	return nil
}
