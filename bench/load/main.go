// Command load measures the turnstile from the outside, in one process on
// loopback: a real Caddy (in process) with the plugin, against fast or
// simulated upstreams. BENCHMARKS.md gives the figures and how to read them.
//
//	go run ./bench/load ab      # request-path overhead: turnstile vs plain reverse_proxy, alternating rounds
//	go run ./bench/load switch  # GPU switch latency, both directions (-llm ollama,vllm -image comfyui,a1111: per engine pair)
//	go run ./bench/load scale   # 10,000 LLM requests waiting behind a hold: memory, release time (-body 8MiB -n 100: the wait budget)
//	go run ./bench/load day     # a simulated day: switches, cold loads, chat waits during renders; ours (with and without co_resident) vs the original policy
//	go run ./bench/load fleet   # a fleet day: N hosts behind a front tier, gpu_turnstile_fleet vs least_conn, round_robin and the old front-tier example
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/gpu-turnstile/caddy-gpu-turnstile"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: load ab|switch|scale|day|fleet [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "ab":
		err = runAB(args)
	case "switch":
		err = runSwitch(args)
	case "scale":
		err = runScale(args)
	case "scale-clients":
		err = runScaleClients(args)
	case "fleet":
		err = runFleet(args)
	case "day":
		err = runDay(args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func newFlags(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ExitOnError) }

// loadCaddy adapts and loads a Caddyfile into this process's Caddy.
func loadCaddy(caddyfile string) error {
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return err
	}
	return caddy.Load(cfg, true)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

const globalOpts = `
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	log {
		output discard
	}
`

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
