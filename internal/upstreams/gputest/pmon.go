package gputest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// busyProc is a process as nvidia-smi pmon shows it (Busy).
type busyProc struct {
	name    string
	typ     string // C, G or C+G
	percent int    // sm %; -1 shows "-"
}

// Busy records a process that FakeSMI's `pmon` shows using percent of the
// card's SMs (-1 shows "-": idle or not sampled), of type typ ("C", "G"
// or "C+G"), until released. Every process holding memory (an engine's
// charge, Foreign) is shown too, as a compute process with "-" unless
// Busy names it; with none, pmon prints its idle row of "-".
func (g *GPU) Busy(name string, pid int, typ string, percent int) (release func()) {
	g.mu.Lock()
	if g.smi.busy == nil {
		g.smi.busy = map[int]busyProc{}
	}
	g.smi.busy[pid] = busyProc{name: name, typ: typ, percent: percent}
	g.record("busy", fmt.Sprintf("%s (pid %d) at %d%%", name, pid, percent)) // and rewrites FakeSMI's files
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.smi.busy, pid)
			g.record("busy", fmt.Sprintf("%s (pid %d) ends", name, pid))
			g.mu.Unlock()
		})
	}
}

// SetPmonUnsupported makes FakeSMI's `pmon` answer as on a card that does
// not support it ("Not supported on the device(s)", exit status 6).
func (g *GPU) SetPmonUnsupported(unsupported bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.smi.unsupported = unsupported
	g.writeSMILocked()
}

// pmonLocked is the file FakeSMI's pmon reads: "supported" or
// "unsupported", then one sample's rows; g.mu is held.
func (g *GPU) pmonLocked() []byte {
	rows := map[int]busyProc{}
	for pid, p := range g.procs {
		if p.bytes > 0 {
			rows[pid] = busyProc{name: p.name, typ: "C", percent: -1}
		}
	}
	maps.Copy(rows, g.smi.busy)
	var b strings.Builder
	b.WriteString(map[bool]string{true: "unsupported\n", false: "supported\n"}[g.smi.unsupported])
	if len(rows) == 0 {
		b.WriteString("    0          -     -      -      -      -      -      -      -    -              \n")
	}
	for _, pid := range slices.Sorted(maps.Keys(rows)) {
		p := rows[pid]
		sm := "-"
		if p.percent >= 0 {
			sm = strconv.Itoa(p.percent)
		}
		name := strings.Join(strings.Fields(baseName(p.name)), " ")
		fmt.Fprintf(&b, "    0 %10d %5s %6s %6s %6s %6s %6s %6s    %-15s\n", pid, p.typ, sm, "-", "-", "-", "-", "-", name)
	}
	return []byte(b.String())
}

// baseName is what pmon shows of a process's name: no directory.
func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}
