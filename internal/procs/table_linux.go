package procs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procRoot is where Linux's process table is read.
var procRoot = "/proc"

// userHZ is the unit of /proc/PID/stat's start time: USER_HZ, which the
// kernel's ABI fixes at 100 on every architecture Go runs on.
const userHZ = 100

// Snapshot reads the host's process table from /proc: each process's
// parent, session, start time and name from /proc/PID/stat, and its
// cgroup. Zombies are left out once all their threads have ended. A
// process that exits while it is read is left out too.
func Snapshot(ctx context.Context) (*Table, error) {
	boot, err := bootTime()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	procs := make([]Proc, 0, len(entries))
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pid, err := strconv.ParseInt(e.Name(), 10, 32)
		if err != nil {
			continue // not a process
		}
		p, ok := readProc(int32(pid), boot)
		if ok {
			procs = append(procs, p)
		}
	}
	return NewTable(procs), nil
}

// readProc reads one process; ok is false if it is gone or a zombie whose
// threads have all ended.
func readProc(pid int32, bootMillis int64) (p Proc, ok bool) {
	dir := filepath.Join(procRoot, strconv.Itoa(int(pid)))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Proc{}, false
	}
	p, state, ok := parseStat(stat)
	if !ok || state == 'X' || (state == 'Z' && !exiting(dir)) {
		return Proc{}, false
	}
	p.PID = pid
	p.Start = bootMillis + p.Start*1000/userHZ
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		p.Cgroup = unifiedCgroup(cg)
	}
	return p, true
}

// exiting reports whether a zombie's threads are still exiting: a
// multi-threaded process killed shows its leader as a zombie while its
// other threads end, and its memory is only given back once they all have
// (a pidfd on it becomes readable only then).
func exiting(dir string) bool {
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	return err == nil && len(tasks) > 1
}

// parseStat reads /proc/PID/stat: "pid (comm) state ppid pgrp session ...
// starttime(22nd)". comm may hold spaces and parentheses, so the fields
// are counted from its last ')'. p.Start is in clock ticks since boot.
func parseStat(b []byte) (p Proc, state byte, ok bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Proc{}, 0, false
	}
	p.Name = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return Proc{}, 0, false
	}
	ppid, err1 := strconv.ParseInt(f[1], 10, 32)
	sid, err2 := strconv.ParseInt(f[3], 10, 32)
	start, err3 := strconv.ParseInt(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || len(f[0]) != 1 {
		return Proc{}, 0, false
	}
	p.PPID, p.Session, p.Start = int32(ppid), int32(sid), start
	return p, f[0][0], true
}

// unifiedCgroup is the cgroup v2 path of /proc/PID/cgroup ("0::/path"),
// or "" under cgroup v1 alone.
func unifiedCgroup(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return path
		}
	}
	return ""
}

// bootTime is when the host booted, in milliseconds since the Unix epoch
// (/proc/stat's btime).
func bootTime() (int64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
			return s * 1000, nil
		}
	}
	return 0, errors.New("no btime in " + filepath.Join(procRoot, "stat"))
}
