//go:build !windows

package presence

import (
	"fmt"
	"strconv"
	"strings"
)

// pmonColumns are where nvidia-smi pmon's columns are, found by the first
// of its two header lines (names, then units):
//
//	# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
//	# Idx           #    C/G      %      %      %      %      %      %    name
//	    0       4242     G     57     12      -      -      -      -    Game.exe
//
// Drivers differ in the columns between type and command (older ones
// lack jpg and ofa, -s um adds fb, -o DT puts a date and a time first),
// so only pid, sm and command are looked for, by name. command is the
// last column; a name with spaces spreads over the fields after it.
type pmonColumns struct {
	pid, sm, command int
}

// pmonHeader reads a header line (one that starts with "#"): ok when it
// is the names line, false for the units line.
func pmonHeader(line string) (c pmonColumns, ok bool) {
	c = pmonColumns{pid: -1, sm: -1, command: -1}
	for i, f := range strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "#")) {
		switch strings.ToLower(f) {
		case "pid":
			c.pid = i
		case "sm":
			c.sm = i
		case "command":
			c.command = i
		}
	}
	return c, c.pid >= 0 && c.sm >= 0 && c.command > max(c.pid, c.sm)
}

// row reads one process's line. idle is a line with no process (pid
// "-": a GPU that runs nothing shows one such line per sample). A sm of
// "-" (idle, or not sampled) is 0.
func (c pmonColumns) row(line string) (u procUse, idle bool, err error) {
	f := strings.Fields(line)
	if len(f) <= c.command {
		return procUse{}, false, fmt.Errorf("nvidia-smi pmon: unexpected line %q", line)
	}
	if f[c.pid] == "-" {
		return procUse{}, true, nil
	}
	pid, err := strconv.ParseInt(f[c.pid], 10, 32)
	if err != nil || pid <= 0 {
		return procUse{}, false, fmt.Errorf("nvidia-smi pmon: unexpected pid in %q", line)
	}
	sm := 0
	if f[c.sm] != "-" {
		if sm, err = strconv.Atoi(f[c.sm]); err != nil || sm < 0 {
			return procUse{}, false, fmt.Errorf("nvidia-smi pmon: unexpected sm in %q", line)
		}
	}
	return procUse{pid: int32(pid), name: strings.Join(f[c.command:], " "), percent: sm}, false, nil
}

// pmonUnsupported reports a line by which nvidia-smi says that the card
// cannot report process use ("Not supported on the device(s)").
func pmonUnsupported(line string) bool {
	return strings.Contains(strings.ToLower(line), "not supported")
}
