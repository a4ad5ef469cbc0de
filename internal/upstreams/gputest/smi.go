package gputest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// UUID is the simulated card's uuid, as nvidia-smi prints it.
const UUID = "GPU-5e1f0c2a-7d3b-4c8e-9a61-0f2b3c4d5e6f"

// Name is the simulated card's name, as nvidia-smi prints it.
const Name = "Simulated GPU"

// smiState is where FakeSMI's script reads the card, and how it fails.
type smiState struct {
	dir     string // "" until FakeSMI
	failing bool   // every call fails, as with the driver gone
	stalled bool   // a -lms loop prints nothing more

	busy        map[int]busyProc // what pmon shows beside the memory charges (Busy)
	unsupported bool             // pmon is not supported on the card
}

// smiScript answers the few nvidia-smi calls the module makes, from the
// state file the GPU rewrites at every change: its first line is
// "uuid total_mib free_mib used_mib failing stalled", each further line
// "pid<TAB>used_mib<TAB>name" for a process holding memory. One open of
// the file is one consistent reading (the GPU replaces it by a rename).
const smiScript = `#!/bin/sh
# A fake nvidia-smi written by gputest.FakeSMI (the simulated GPU of the
# caddy-gpu-turnstile tests). It answers
#   --query-gpu=FIELDS --format=csv,noheader,nounits [-i 0] [-lms MS]
#   --query-compute-apps=FIELDS --format=csv,noheader,nounits [-i 0] [-lms MS]
# in MiB,
#   pmon [-i 0] [-s u] [-d SECONDS] [-c COUNT]
# with its two header lines and a sample every SECONDS, and exits 9 on
# anything else.
state=@STATE@
pmonstate=@PMON@
bad() {
	echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." >&2
	exit 9
}
noid() {
	case $1 in
	'' | 0 | @UUID@) ;;
	*) echo "No devices were found" >&2; exit 9 ;;
	esac
}
# failed exits as a gone driver does, if the card says so; stalled
# reports a stalled card.
failed() {
	if [ ! -r "$state" ]; then
		echo "Failed to initialize NVML: Unknown Error" >&2
		exit 9
	fi
	read -r _ _ _ _ failing stalled <"$state"
	if [ "$failing" != 0 ]; then
		echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running." >&2
		exit 9
	fi
}
pmon() {
	id= sel=u delay=1 count=
	while [ $# -gt 0 ]; do
		case $1 in
		-i | --id) [ $# -ge 2 ] || bad; id=$2; shift ;;
		-s | --select) [ $# -ge 2 ] || bad; sel=$2; shift ;;
		-d | --delay) [ $# -ge 2 ] || bad; delay=$2; shift ;;
		-c | --count) [ $# -ge 2 ] || bad; count=$2; shift ;;
		*) bad ;;
		esac
		shift
	done
	noid "$id"
	[ "$sel" = u ] || bad
	case $delay in [1-9] | 10) ;; *) bad ;; esac
	case $count in '') ;; *[!0-9]* | 0) bad ;; esac
	failed
	read -r support <"$pmonstate"
	if [ "$support" != supported ]; then
		echo "Not supported on the device(s)"
		echo "Failed to process command line"
		exit 6
	fi
	echo "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command "
	echo "# Idx           #    C/G      %      %      %      %      %      %    name "
	n=0
	while :; do
		failed
		[ "$stalled" != 0 ] || sed 1d "$pmonstate"
		n=$((n + 1))
		[ -z "$count" ] || [ $n -lt "$count" ] || exit 0
		sleep "$delay"
	done
}
if [ "${1-}" = pmon ]; then
	shift
	pmon "$@"
fi
mode= fields= format= id= lms=
while [ $# -gt 0 ]; do
	case $1 in
	--query-gpu=*) [ -z "$mode" ] || bad; mode=gpu fields=${1#*=} ;;
	--query-compute-apps=*) [ -z "$mode" ] || bad; mode=apps fields=${1#*=} ;;
	--format=*) format=${1#*=} ;;
	-i | --id) [ $# -ge 2 ] || bad; id=$2; shift ;;
	--id=*) id=${1#*=} ;;
	-lms | --loop-ms) [ $# -ge 2 ] || bad; lms=$2; shift ;;
	--loop-ms=*) lms=${1#*=} ;;
	*) bad ;;
	esac
	shift
done
[ -n "$mode" ] && [ -n "$fields" ] && [ "$format" = csv,noheader,nounits ] || bad
noid "$id"
case $lms in
'') ;;
*[!0-9]* | 0) bad ;;
esac
IFS=,
for f in $fields; do
	case $mode:$f in
	gpu:uuid | gpu:name | gpu:index | gpu:memory.total | gpu:memory.free | gpu:memory.used) ;;
	apps:pid | apps:used_memory | apps:process_name | apps:name | apps:gpu_uuid) ;;
	*) echo "Field \"$f\" is not a valid field to query." >&2; exit 9 ;;
	esac
done
unset IFS

# answer prints one reading; in a stalled loop, none.
answer() {
	if [ ! -r "$state" ]; then
		echo "Failed to initialize NVML: Unknown Error" >&2
		exit 9
	fi
	{
		read -r uuid total free used failing stalled
		if [ "$failing" != 0 ]; then
			echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running." >&2
			exit 9
		fi
		if [ -n "$lms" ] && [ "$stalled" != 0 ]; then
			return
		fi
		if [ $mode = gpu ]; then
			line=
			IFS=,
			for f in $fields; do
				case $f in
				uuid) v=$uuid ;;
				name) v=@NAME@ ;;
				index) v=0 ;;
				memory.total) v=$total ;;
				memory.free) v=$free ;;
				memory.used) v=$used ;;
				esac
				line=${line:+$line, }$v
			done
			unset IFS
			printf '%s\n' "$line"
			return
		fi
		while IFS='	' read -r pid mib name; do
			line=
			IFS=,
			for f in $fields; do
				case $f in
				pid) v=$pid ;;
				used_memory) v=$mib ;;
				process_name | name) v=$name ;;
				gpu_uuid) v=$uuid ;;
				esac
				line=${line:+$line, }$v
			done
			unset IFS
			printf '%s\n' "$line"
		done
	} <"$state"
}

answer
[ -n "$lms" ] || exit 0
pause=$((lms / 1000)).$(printf %03d $((lms % 1000)))
while :; do
	sleep $pause
	answer
done
`

// FakeSMI writes an executable dir/nvidia-smi (a POSIX sh script) that
// answers from this card, and the state file it reads, which the GPU
// rewrites at every change (by a rename, so a reading is never half a
// file). It answers, like the real one (MiB, ", " between values, no
// header, no units), with one line for
//
//	nvidia-smi --query-gpu=uuid,memory.total,memory.free --format=csv,noheader,nounits -i 0
//
// (fields uuid, name, index, memory.total, memory.free, memory.used, in
// the order asked), and with one line per process holding memory (the
// engines' charges summed under their pid, each Foreign under its own;
// nothing when none) for
//
//	nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -i 0
//
// (fields pid, used_memory, process_name, gpu_uuid). With -lms MS it
// prints the same again every MS milliseconds until killed (a killed
// loop's sleep may outlive it by MS). It answers
//
//	nvidia-smi pmon -i 0 -s u -d SECONDS [-c COUNT]
//
// as a current driver does (see Busy). -i may be omitted, 0 or UUID.
// Anything else exits 9. See SetSMIFailing and SetSMIStalled. It panics
// if it cannot write the script.
func (g *GPU) FakeSMI(dir string) (path string) {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	script := strings.NewReplacer("@STATE@", quote(filepath.Join(dir, "state")), "@PMON@", quote(filepath.Join(dir, "pmon")),
		"@UUID@", UUID, "@NAME@", quote(Name)).Replace(smiScript)
	path = filepath.Join(dir, "nvidia-smi")
	g.mu.Lock()
	defer g.mu.Unlock()
	g.smi.dir = dir
	g.writeSMILocked()
	if err := writeFileAtomic(path, []byte(script), 0o755); err != nil {
		panic("gputest: FakeSMI: " + err.Error())
	}
	return path
}

// SetSMIFailing makes every call of FakeSMI's script, a -lms loop
// included, print an error to stderr and exit 9, as when the driver is
// gone; false restores normal answers.
func (g *GPU) SetSMIFailing(failing bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.smi.failing = failing
	g.writeSMILocked()
}

// SetSMIStalled makes FakeSMI's -lms loops stop printing, though they go
// on running; false resumes them. One-shot calls still answer.
func (g *GPU) SetSMIStalled(stalled bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.smi.stalled = stalled
	g.writeSMILocked()
}

// writeSMILocked rewrites FakeSMI's state file; g.mu is held. A failed
// write (the test's directory already removed) is ignored: the file then
// keeps its last reading.
func (g *GPU) writeSMILocked() {
	if g.smi.dir == "" {
		return
	}
	flag := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d %d %d %d %d\n", UUID, g.total>>20, g.freeLocked()>>20, g.used>>20, flag(g.smi.failing), flag(g.smi.stalled))
	pids := make([]int, 0, len(g.procs))
	for pid := range g.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		p := g.procs[pid]
		if p.bytes <= 0 {
			continue
		}
		name := strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, p.name)
		fmt.Fprintf(&b, "%d\t%d\t%s\n", pid, p.bytes>>20, name)
	}
	writeFileAtomic(filepath.Join(g.smi.dir, "state"), []byte(b.String()), 0o644)
	writeFileAtomic(filepath.Join(g.smi.dir, "pmon"), g.pmonLocked(), 0o644)
}

// writeFileAtomic writes a temporary file in path's directory and renames
// it to path.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
