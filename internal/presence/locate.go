package presence

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"strconv"
	"time"
)

// LocateGPUProcesses builds the gpu_process condition on this host: a
// process on GPU index that is none of the engines' own (found by who
// listens on the ports of engineURLs, with their children), none of the
// desktop's unless includeDesktop, and none of except. It needs
// nvidia-smi; each sample is bounded by timeout. Engines whose processes
// cannot be known turn it off (see [enginesHere]).
func LocateGPUProcesses(index int, except []string, includeDesktop bool, engineURLs []string, timeout time.Duration) (Sampler, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, errors.New("nvidia-smi not found in PATH, so GPU processes cannot be seen")
	}
	s, err := GPUProcesses(path, index, except, includeDesktop, enginesHere(engineURLs))
	if err != nil {
		return nil, err
	}
	return bounded{s, timeout}, nil
}

// LocateGPUBusy builds the gpu_busy condition on this host, for GPU index
// sampled about every poll: on Linux from nvidia-smi pmon (which it
// needs), on Windows from the PDH GPU Engine counters (every GPU; the
// index is not used). The engines' processes are found as for
// gpu_process.
func LocateGPUBusy(index int, poll time.Duration, o BusyOptions, engineURLs []string) (Sampler, error) {
	source, interval, err := busySource(index, poll)
	if err != nil {
		return nil, err
	}
	return newBusySampler(o, interval, source, enginesHere(engineURLs))
}

// bounded bounds each sample by a timeout: nvidia-smi is killed at the
// deadline, so a hung driver cannot stall the watch.
type bounded struct {
	Sampler
	timeout time.Duration
}

func (b bounded) Sample(ctx context.Context) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Sampler.Sample(ctx)
}

// enginePorts are the TCP ports of the engines' URLs: the engines'
// processes (and their children) are found by who listens there.
func enginePorts(urls []string) []int {
	var ports []int
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		p := u.Port()
		if p == "" {
			p = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
		}
		if n, err := strconv.Atoi(p); err == nil {
			ports = append(ports, n)
		}
	}
	return ports
}

// EngineProcesses returns what EnginePIDs finds for the engines at urls:
// the processes listening on their ports, and those processes'
// descendants.
func EngineProcesses(urls []string) func(ctx context.Context) (map[int32]bool, error) {
	ports := enginePorts(urls)
	return func(ctx context.Context) (map[int32]bool, error) { return EnginePIDs(ctx, ports) }
}
