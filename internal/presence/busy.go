package presence

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// BusyOptions configure hold_while gpu_busy.
type BusyOptions struct {
	Percent        int           // a process counts at or over this use (1-100)
	For            time.Duration // in every sample for this long
	Except         []string      // globs of processes that never count
	IncludeDesktop bool          // the desktop's processes count too
}

// busySampler is hold_while gpu_busy: a process that is none of the
// engines', none of the excepted and (unless included) none of the
// desktop's, whose use of the GPU has been at or over a percentage in
// every sample for a while. Its source (nvidia-smi pmon, the PDH GPU
// Engine counters) runs beside the samples and feeds the tracker.
type busySampler struct {
	opts   BusyOptions
	source func(ctx context.Context, t *usageTracker)
	t      *usageTracker
	m      matcher
	names  func(ctx context.Context, pid int32) []string // a process's other names, for the except globs
	own    ownCheck
}

func newBusySampler(o BusyOptions, interval time.Duration, source func(context.Context, *usageTracker), own func(context.Context) (map[int32]bool, error)) (*busySampler, error) {
	if o.Percent < 1 || o.Percent > 100 {
		return nil, fmt.Errorf("gpu_busy: %d%% is not from 1 to 100", o.Percent)
	}
	if o.For <= 0 {
		return nil, fmt.Errorf("gpu_busy: for %v is not positive", o.For)
	}
	m, err := newMatcher(exceptGlobs(o.Except, o.IncludeDesktop))
	if err != nil {
		return nil, err
	}
	o.Except = slices.Clone(o.Except)
	return &busySampler{opts: o, source: source, t: newUsageTracker(o.Percent, o.For, interval), m: m,
		names: processNames, own: ownCheck{f: own}}, nil
}

func (s *busySampler) String() string {
	return conditionString(fmt.Sprintf("gpu_busy %d for %v", s.opts.Percent, s.opts.For), s.opts.IncludeDesktop, s.opts.Except)
}

// Run runs the source until ctx ends (the Watcher runs it).
func (s *busySampler) Run(ctx context.Context) { s.source(ctx, s.t) }

// Sample reports the busiest process that has been busy for long enough
// and is nobody's to except; the source's trouble, if it gives no
// samples; or an *OffError when the engines' processes cannot be known.
func (s *busySampler) Sample(ctx context.Context) (string, bool, error) {
	if err := s.t.state(); err != nil {
		return "", false, err
	}
	type candidate struct {
		procUse
		shown string // the name in the owner
	}
	var cands []candidate
	for _, u := range s.t.busy(time.Now()) {
		names := append([]string{u.name}, s.names(ctx, u.pid)...)
		if _, ok := s.m.match(names...); !ok {
			cands = append(cands, candidate{u, shownName(names)})
		}
	}
	own, err := s.own.check(ctx, len(cands) > 0)
	if err != nil {
		return "", false, err
	}
	for _, c := range cands {
		if !own[c.pid] {
			return fmt.Sprintf("gpu_busy:%s (pid %d)", c.shown, c.pid), true, nil
		}
	}
	return "", false, nil
}

// shownName is the first of names that is not empty, as a base name.
func shownName(names []string) string {
	for _, n := range names {
		if b := baseName(n); b != "" {
			return b
		}
	}
	return "?"
}

// processNames are a process's name, executable and first argument, as
// far as they can be read (a process gone meanwhile has none).
func processNames(ctx context.Context, pid int32) []string {
	p, err := process.NewProcessWithContext(ctx, pid)
	if err != nil {
		return nil
	}
	var names []string
	if n, err := p.NameWithContext(ctx); err == nil {
		names = append(names, n)
	}
	if exe, err := p.ExeWithContext(ctx); err == nil {
		names = append(names, exe)
	}
	if args, err := p.CmdlineSliceWithContext(ctx); err == nil && len(args) > 0 {
		names = append(names, args[0])
	}
	return names
}
