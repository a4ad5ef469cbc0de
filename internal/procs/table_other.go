//go:build !linux

package procs

import (
	"context"

	"github.com/shirou/gopsutil/v4/process"
)

// Snapshot reads the host's process table through gopsutil: PIDs,
// parents, creation times and names (Windows, macOS). Sessions and
// cgroups are Linux's alone. A process that exits while it is read is
// left out.
func Snapshot(ctx context.Context) (*Table, error) {
	ps, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, err
	}
	procs := make([]Proc, 0, len(ps))
	for _, p := range ps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start, err := p.CreateTimeWithContext(ctx)
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		ppid, _ := p.PpidWithContext(ctx)
		name, _ := p.NameWithContext(ctx)
		procs = append(procs, Proc{ID: ID{PID: p.Pid, Start: start}, PPID: ppid, Name: name})
	}
	return NewTable(procs), nil
}
