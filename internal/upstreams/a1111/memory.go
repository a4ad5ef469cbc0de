package a1111

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// Memory is what /sdapi/v1/memory says of the GPU.
type Memory struct {
	// CUDA is false when the server has no CUDA reading: its cuda is
	// {"error":…} ("unavailable" on a CPU, MPS or DirectML device, or
	// torch's own error).
	CUDA      bool
	CUDAError string // that error, when CUDA is false
	// Reserved is cuda.reserved.current: what PyTorch reserves in this
	// process, its CUDA context not included.
	Reserved int64
	// SystemFree and SystemTotal are cuda.system, torch.cuda.mem_get_info:
	// the whole device, other processes included.
	SystemFree, SystemTotal int64
}

// Memory reads /memory.
func (c *Client) Memory(ctx context.Context) (Memory, error) {
	// Figures are integers, but decoding them as floats also takes the
	// ones psutil gives as floats, and bytes stay exact below 2^53.
	var out struct {
		CUDA struct {
			Error  *string `json:"error"`
			System *struct {
				Free  float64 `json:"free"`
				Total float64 `json:"total"`
			} `json:"system"`
			Reserved *struct {
				Current float64 `json:"current"`
			} `json:"reserved"`
		} `json:"cuda"`
	}
	if err := c.do(ctx, http.MethodGet, "/sdapi/v1/memory", &out); err != nil {
		return Memory{}, err
	}
	cu := out.CUDA
	switch {
	case cu.Error != nil:
		return Memory{CUDAError: *cu.Error}, nil
	case cu.System == nil || cu.Reserved == nil:
		return Memory{CUDAError: "no cuda figures in /sdapi/v1/memory"}, nil
	}
	return Memory{CUDA: true, Reserved: int64(cu.Reserved.Current),
		SystemFree: int64(cu.System.Free), SystemTotal: int64(cu.System.Total)}, nil
}

// ErrNoGPUReading says that the server reports no CUDA memory, so a free
// cannot be confirmed through it: it runs on a CPU, on MPS or on DirectML
// (the last two are GPUs all the same).
var ErrNoGPUReading = errors.New("a1111 reports no CUDA memory (it runs on a CPU, MPS or DirectML device)")

// FreedFloor is the reserved memory at or below which FreeAndConfirm
// counts the checkpoint as off the GPU. With the model moved to the CPU
// (A1111) or freed (Forge) and PyTorch's cache emptied, which both unloads
// do before they answer, a process keeps only a few blocks reserved; its
// CUDA context is never counted in reserved.current. A fixed floor rather
// than "below the reading before": any fall, however small, would pass
// that, and a reading taken before during a load would be no baseline.
const FreedFloor = 512 << 20

// FreeAndConfirm unloads the checkpoint (UnloadCheckpoint) and confirms
// through /memory that the process's reserved CUDA memory has fallen to
// FreedFloor, polling with poll.New(pollMax) until ctx ends. Nothing held
// before counts as confirmed too. A server without CUDA cannot confirm
// it: confirmed is false and err wraps ErrNoGPUReading, though the unload
// was sent and done. Memory that other models keep (an upscaler or
// interrogator kept in memory, an extension's model) keeps it from being
// confirmed, as it should: that memory is not free.
func (c *Client) FreeAndConfirm(ctx context.Context, pollMax time.Duration) (confirmed bool, err error) {
	before := int64(-1) // unknown
	if m, err := c.Memory(ctx); err == nil && m.CUDA {
		before = m.Reserved
	}
	if err := c.UnloadCheckpoint(ctx); err != nil {
		return false, fmt.Errorf("a1111 unload-checkpoint: %w", err)
	}
	pace := poll.New(pollMax)
	last := int64(-1)
	for {
		m, err := c.Memory(ctx)
		switch {
		case err != nil && ctx.Err() != nil && last >= 0:
			return false, stillReserved(last, before, ctx.Err()) // the deadline passed while polling
		case err != nil:
			return false, fmt.Errorf("read a1111 memory after unload-checkpoint: %w", err)
		case !m.CUDA:
			return false, fmt.Errorf("%w (cuda: %s); unload-checkpoint was sent", ErrNoGPUReading, m.CUDAError)
		case m.Reserved <= FreedFloor:
			return true, nil
		}
		last = m.Reserved
		if err := pace.Wait(ctx); err != nil {
			return false, stillReserved(last, before, err)
		}
	}
}

// stillReserved is the error of a free not confirmed in time; before is
// -1 when there was no reading before the unload.
func stillReserved(now, before int64, err error) error {
	if before < 0 {
		return fmt.Errorf("a1111 still reserves %d MiB after unload-checkpoint: %w", now>>20, err)
	}
	return fmt.Errorf("a1111 still reserves %d MiB after unload-checkpoint (%d MiB before): %w", now>>20, before>>20, err)
}
