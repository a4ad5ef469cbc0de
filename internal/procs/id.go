package procs

import (
	"fmt"
	"slices"
)

// ID names one process for as long as it lives: its PID and when it
// started (milliseconds since the Unix epoch, as gopsutil's CreateTime
// gives it). A PID with another start time is another process.
type ID struct {
	PID   int32 `json:"pid"`
	Start int64 `json:"start"`
}

// String is the ID as logs show it.
func (id ID) String() string { return fmt.Sprintf("%d@%d", id.PID, id.Start) }

// Proc is one process as a Table saw it.
type Proc struct {
	ID
	PPID int32  `json:"ppid,omitempty"`
	Name string `json:"name,omitempty"`
	// Session is its session id (Linux; 0 elsewhere): a model server
	// started in its own process group keeps its engine's session after
	// the engine has died and it has been re-parented.
	Session int32 `json:"session,omitempty"`
	// Cgroup is its cgroup v2 path (Linux; "" elsewhere): a systemd
	// service's processes share their unit's.
	Cgroup string `json:"cgroup,omitempty"`
}

// Table is a snapshot of the host's processes.
type Table struct {
	procs    map[int32]Proc
	children map[int32][]int32
}

// NewTable makes a Table of procs (for tests, and for platforms read
// through gopsutil).
func NewTable(procs []Proc) *Table {
	t := &Table{procs: make(map[int32]Proc, len(procs)), children: map[int32][]int32{}}
	for _, p := range procs {
		t.procs[p.PID] = p
		t.children[p.PPID] = append(t.children[p.PPID], p.PID)
	}
	for _, c := range t.children {
		slices.Sort(c)
	}
	return t
}

// Len is how many processes the table holds.
func (t *Table) Len() int { return len(t.procs) }

// Get is the process with pid, if the table has one.
func (t *Table) Get(pid int32) (Proc, bool) {
	p, ok := t.procs[pid]
	return p, ok
}

// Alive reports whether the process id names is still running: its PID is
// in the table with the same start time. A zombie is not in the table
// once all its threads have ended: it has exited and holds no memory.
func (t *Table) Alive(id ID) bool {
	p, ok := t.procs[id.PID]
	return ok && p.Start == id.Start
}

// Left is the processes of ids still alive, in the order given.
func (t *Table) Left(ids []ID) []Proc {
	var left []Proc
	for _, id := range ids {
		if p, ok := t.procs[id.PID]; ok && p.Start == id.Start {
			left = append(left, p)
		}
	}
	return left
}

// Tree is the process pid and all its descendants, parents before their
// children; nil if pid is not in the table.
func (t *Table) Tree(pid int32) []Proc {
	root, ok := t.procs[pid]
	if !ok {
		return nil
	}
	tree := []Proc{root}
	seen := map[int32]bool{pid: true}
	for i := 0; i < len(tree); i++ {
		for _, c := range t.children[tree[i].PID] {
			if !seen[c] {
				seen[c] = true
				tree = append(tree, t.procs[c])
			}
		}
	}
	return tree
}

// Descendants is Tree without the process itself.
func (t *Table) Descendants(pid int32) []Proc {
	tree := t.Tree(pid)
	if len(tree) == 0 {
		return nil
	}
	return tree[1:]
}

// InSession lists the processes of session sid (none for sid 0, which
// the kernel's own threads share), sorted by PID.
func (t *Table) InSession(sid int32) []Proc {
	if sid <= 0 {
		return nil
	}
	var in []Proc
	for _, p := range t.procs {
		if p.Session == sid {
			in = append(in, p)
		}
	}
	slices.SortFunc(in, func(a, b Proc) int { return int(a.PID - b.PID) })
	return in
}
