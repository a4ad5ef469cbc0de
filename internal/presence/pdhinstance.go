package presence

import (
	"math"
	"strconv"
	"strings"
)

// pdhValue is one instance of the Windows counter
// \GPU Engine(*engtype_3D)\Utilization Percentage: one engine of one
// adapter as used by one process, e.g. instance
// pid_4242_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D.
type pdhValue struct {
	instance string
	value    float64
}

// pdhPID reads the process id that begins a GPU Engine instance name.
func pdhPID(instance string) (int32, bool) {
	rest, ok := strings.CutPrefix(instance, "pid_")
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, "_")
	pid, err := strconv.ParseInt(digits, 10, 32)
	return int32(pid), err == nil && pid > 0
}

// usesByPID sums each process's 3D engines (a process has one per
// adapter and engine it uses), capped at 100, in the order first seen.
// Instances whose name has no pid are left out.
func usesByPID(vals []pdhValue) []procUse {
	var out []procUse
	at := map[int32]int{}
	sums := map[int32]float64{}
	for _, v := range vals {
		pid, ok := pdhPID(v.instance)
		if !ok {
			continue
		}
		if _, seen := at[pid]; !seen {
			at[pid] = len(out)
			out = append(out, procUse{pid: pid})
		}
		sums[pid] += v.value
	}
	for i := range out {
		out[i].percent = int(math.Round(min(sums[out[i].pid], 100)))
	}
	return out
}
