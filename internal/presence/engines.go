package presence

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// EnginePIDs returns the processes listening on the given TCP ports (the
// engines' URLs) and all their descendants (llama.cpp's children, Ollama's
// runners, vLLM's EngineCore), found with gopsutil (the system's TCP
// sockets, and each process's parent). A port nothing listens on adds
// nothing: an engine that is down owns no process, and what it left on the
// GPU (an orphaned Ollama runner) then counts as foreign. A listening
// socket whose process cannot be seen (another user's, without the rights
// to read its file descriptors) is an error, not an absence: counting that
// engine's GPU process as a person's would hold the GPU for nothing.
//
// It reads every process's sockets and parent, so it costs a walk of the
// process table; GPUProcesses calls it only when nvidia-smi lists a process
// that is not excepted.
func EnginePIDs(ctx context.Context, ports []int) (map[int32]bool, error) {
	listeners, err := listening(ctx, ports)
	if err != nil {
		return nil, err
	}
	own := make(map[int32]bool)
	for _, port := range slices.Sorted(maps.Keys(listeners)) {
		for _, pid := range listeners[port] {
			if pid <= 0 {
				return nil, fmt.Errorf("port %d: the listening process is not visible (another user's? run as that user or as root)", port)
			}
			own[pid] = true
		}
	}
	return withDescendants(ctx, own)
}

// listening maps each of ports that something listens on (TCP) to the
// listening processes; a PID of 0 is a process this one may not see.
func listening(ctx context.Context, ports []int) (map[int][]int32, error) {
	return procs.Listeners(ctx, ports)
}

// withDescendants adds to own every descendant of its processes.
func withDescendants(ctx context.Context, own map[int32]bool) (map[int32]bool, error) {
	if len(own) == 0 {
		return own, nil
	}
	children, err := childrenOf(ctx)
	if err != nil {
		return nil, err
	}
	queue := make([]int32, 0, len(own))
	for pid := range own {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !own[c] {
				own[c] = true
				queue = append(queue, c)
			}
		}
	}
	return own, nil
}

// childrenOf maps each process to its children, from one pass over the
// process table (a process that ends meanwhile is left out).
func childrenOf(ctx context.Context) (map[int32][]int32, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	children := make(map[int32][]int32, len(procs))
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ppid, err := p.PpidWithContext(ctx)
		if err != nil || ppid == p.Pid {
			continue
		}
		children[ppid] = append(children[ppid], p.Pid)
	}
	return children, nil
}
