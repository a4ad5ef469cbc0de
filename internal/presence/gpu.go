package presence

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// smiWaitDelay bounds how long a killed nvidia-smi may keep its output
// open (through a child it started, or a wrapper script's): past it the
// pipes are closed and the run fails, so the context's deadline holds.
const smiWaitDelay = 200 * time.Millisecond

// A gpuProc is one process nvidia-smi lists on the GPU.
type gpuProc struct {
	pid  int32
	name string // as nvidia-smi prints it, often a full path
	typ  string // "C", "G" or "C+G"
}

type gpuSampler struct {
	smi            string
	index          int
	except         []string
	includeDesktop bool
	m              matcher
	own            ownCheck
}

// GPUProcesses reads nvidia-smi (smiPath, GPU index) for processes using
// the GPU: compute apps (--query-compute-apps=pid,process_name,used_memory
// --format=csv,noheader,nounits -i N) and graphics processes (games are
// graphics contexts, not listed by --query-compute-apps), read from the
// "Processes" section of `nvidia-smi -q -d PIDS -i N` (Type G, C or C+G).
// Each nvidia-smi run is bounded by the ctx: it is killed at its deadline.
// Processes whose name matches an except glob (same rules as [Processes]),
// the desktop's ([Desktop]) unless includeDesktop, or whose PID is in
// own() (the engines' own processes and their descendants, see
// [EnginePIDs]) do not count; own may be nil, and is called at the first
// sample, then only when nvidia-smi lists a process the except globs
// leave (or while it says the condition is off, an [*OffError]). The
// owner is "gpu_process:NAME (pid N)", NAME being the base name
// nvidia-smi shows. A failed or unparseable nvidia-smi run is an error.
func GPUProcesses(smiPath string, index int, except []string, includeDesktop bool, own func(ctx context.Context) (map[int32]bool, error)) (Sampler, error) {
	if smiPath == "" {
		return nil, errors.New("no nvidia-smi path")
	}
	if index < 0 {
		return nil, fmt.Errorf("GPU index %d: must be 0 or more", index)
	}
	m, err := newMatcher(exceptGlobs(except, includeDesktop))
	if err != nil {
		return nil, err
	}
	return &gpuSampler{smi: smiPath, index: index, except: slices.Clone(except), includeDesktop: includeDesktop,
		m: m, own: ownCheck{f: own}}, nil
}

func (s *gpuSampler) String() string {
	return conditionString("gpu_process", s.includeDesktop, s.except)
}

func (s *gpuSampler) Sample(ctx context.Context) (string, bool, error) {
	// The compute list first: it is the cheaper query, and a foreign CUDA
	// process found there saves the second run.
	out, err := s.run(ctx, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
	if err != nil {
		return "", false, err
	}
	procs, err := parseComputeApps(out)
	if err != nil {
		return "", false, err
	}
	owner, found, err := s.foreign(ctx, procs)
	if err != nil || found {
		return owner, found, err
	}
	out, err = s.run(ctx, "-q", "-d", "PIDS")
	if err != nil {
		return "", false, err
	}
	procs, err = parsePIDs(out)
	if err != nil {
		return "", false, err
	}
	return s.foreign(ctx, procs)
}

// foreign returns the first of procs that is neither excepted nor the
// engines' own.
func (s *gpuSampler) foreign(ctx context.Context, procs []gpuProc) (string, bool, error) {
	var left []gpuProc
	for _, p := range procs {
		if _, ok := s.m.match(p.name); !ok {
			left = append(left, p)
		}
	}
	own, err := s.own.check(ctx, len(left) > 0)
	if err != nil {
		return "", false, err
	}
	for _, p := range left {
		if !own[p.pid] {
			return fmt.Sprintf("gpu_process:%s (pid %d)", baseName(p.name), p.pid), true, nil
		}
	}
	return "", false, nil
}

// run runs nvidia-smi with args and -i INDEX and returns its standard
// output.
func (s *gpuSampler) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.smi, append(args, "-i", strconv.Itoa(s.index))...)
	cmd.WaitDelay = smiWaitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("nvidia-smi %s: %w", args[0], ctx.Err())
	}
	// nvidia-smi prints its failures ("NVIDIA-SMI has failed because...",
	// "No devices were found") on standard output.
	msg := firstLine(stderr.Bytes())
	if msg == "" {
		msg = firstLine(stdout.Bytes())
	}
	if msg != "" {
		return nil, fmt.Errorf("nvidia-smi %s: %w: %s", args[0], err, msg)
	}
	return nil, fmt.Errorf("nvidia-smi %s: %w", args[0], err)
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.TrimSpace(line))
}

// parseComputeApps reads `--query-compute-apps=pid,process_name,used_memory
// --format=csv,noheader,nounits`: one "PID, NAME, MIB" line per process,
// nothing when there is none. used_memory may be [N/A] and is not used; a
// name may itself contain ", ", so the PID is cut at the first comma and
// the memory at the last.
func parseComputeApps(out []byte) ([]gpuProc, error) {
	var procs []gpuProc
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "No running") {
			continue
		}
		pidStr, rest, ok1 := strings.Cut(line, ",")
		i := strings.LastIndex(rest, ",")
		pid, err := strconv.ParseInt(strings.TrimSpace(pidStr), 10, 32)
		if !ok1 || i < 0 || err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps: unexpected line %q", line)
		}
		procs = append(procs, gpuProc{pid: int32(pid), name: strings.TrimSpace(rest[:i]), typ: "C"})
	}
	return procs, sc.Err()
}

// parsePIDs reads the "Processes" section of `nvidia-smi -q -d PIDS`:
//
//	Processes
//	    GPU instance ID                   : N/A
//	    Compute instance ID               : N/A
//	    Process ID                        : 1742
//	        Type                          : G
//	        Name                          : /usr/lib/xorg/Xorg
//	        Used GPU Memory               : 215 MiB
//
// one "Process ID" record per process, or "Processes : None". Keys are
// found by name, whatever their indentation.
func parsePIDs(out []byte) ([]gpuProc, error) {
	var procs []gpuProc
	in := false   // inside a Processes section
	cur := -1     // index in procs of the record being read
	sections := 0 // Processes sections seen
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		key, val, _ := strings.Cut(line, ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch {
		case key == "Processes":
			in, cur = true, -1
			sections++
		case key != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			// An unindented line (a GPU's header) ends the section.
			in, cur = false, -1
		case !in:
		case key == "Process ID":
			pid, err := strconv.ParseInt(val, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("nvidia-smi -q -d PIDS: unexpected process ID %q", val)
			}
			procs = append(procs, gpuProc{pid: int32(pid)})
			cur = len(procs) - 1
		case cur < 0:
		case key == "Type":
			procs[cur].typ = val
		case key == "Name":
			procs[cur].name = val
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if sections == 0 {
		return nil, fmt.Errorf("nvidia-smi -q -d PIDS: no Processes section in %q", firstLine(out))
	}
	return procs, nil
}
