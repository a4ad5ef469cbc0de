package presence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/shirou/gopsutil/v4/process"
)

// A Sampler looks once: whether the condition holds now, and who it is
// (owner, e.g. "process:steam" or "gpu_process:game.exe (pid 4242)").
// String names the condition in messages.
type Sampler interface {
	Sample(ctx context.Context) (owner string, present bool, err error)
	String() string
}

type procSampler struct {
	globs []string
	m     matcher
}

// Processes matches running processes against globs (path.Match syntax,
// case-insensitive on every platform, see the package doc): a process
// matches if its executable's base name, its name (gopsutil Name()), or its
// command line's first argument's base name matches any glob, with or
// without a trailing ".exe". The owner is "process:" and the name that
// matched. Zombies and the calling process itself never match. A glob that
// is empty, malformed or contains "/" is an error, and so is an empty list.
func Processes(globs []string) (Sampler, error) {
	if len(globs) == 0 {
		return nil, errors.New("no process name globs")
	}
	m, err := newMatcher(globs)
	if err != nil {
		return nil, err
	}
	return &procSampler{globs: slices.Clone(globs), m: m}, nil
}

func (s *procSampler) String() string { return "process " + strings.Join(s.globs, " ") }

func (s *procSampler) Sample(ctx context.Context) (string, bool, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return "", false, fmt.Errorf("listing processes: %w", err)
	}
	self := int32(os.Getpid())
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return "", false, err
		}
		if p.Pid == self {
			continue
		}
		if name, ok := s.matchProcess(ctx, p); ok && !zombie(ctx, p) {
			return "process:" + name, true, nil
		}
	}
	return "", false, nil
}

// matchProcess tries the cheap name first; a process gone meanwhile just
// yields no names.
func (s *procSampler) matchProcess(ctx context.Context, p *process.Process) (string, bool) {
	if name, err := p.NameWithContext(ctx); err == nil {
		if b, ok := s.m.match(name); ok {
			return b, true
		}
	}
	if exe, err := p.ExeWithContext(ctx); err == nil {
		if b, ok := s.m.match(exe); ok {
			return b, true
		}
	}
	if args, err := p.CmdlineSliceWithContext(ctx); err == nil && len(args) > 0 {
		if b, ok := s.m.match(args[0]); ok {
			return b, true
		}
	}
	return "", false
}

// zombie reports a process that has ended but is not reaped yet: it still
// has a name, but no longer runs (or holds a GPU).
func zombie(ctx context.Context, p *process.Process) bool {
	st, err := p.StatusWithContext(ctx)
	return err == nil && slices.Contains(st, process.Zombie)
}
