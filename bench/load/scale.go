package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// runScale queues N LLM requests behind a hold and measures this process
// (Caddy, the turnstile and the fakes) while they wait; the clients run in
// a child process so that their memory is not counted. With -body SIZE
// each request carries a body of that size; those that do not fit in
// wait_buffer_limit (-limit, default 256MiB) get the busy answer at once.
func runScale(args []string) error {
	fs := newFlags("scale")
	n := fs.Int("n", 10000, "LLM requests")
	bodySize := fs.String("body", "", "size of each request body (e.g. 8MiB); default a small chat")
	limit := fs.String("limit", "", "wait_buffer_limit (default the plugin's, 256MiB)")
	fs.Parse(args)
	settings := "llm_wait_timeout 5m"
	if *limit != "" {
		settings += "\n\t\twait_buffer_limit " + *limit
	}
	gpu := gputest.New()
	oll, _, llm, _, admin, err := simulated(gpu,
		ollamatest.Options{LoadDelay: time.Millisecond, UnloadDelay: time.Millisecond, Tokens: 1},
		comfytest.Options{}, settings)
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	holdID, err := takeBenchHold(admin)
	if err != nil {
		return err
	}

	runtime.GC()
	rss0 := rss()
	child := exec.Command(os.Args[0], "scale-clients", "-n", strconv.Itoa(*n), "-url", llm+"/api/chat", "-body", *bodySize)
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	st, err := waitQueued(llm, admin, *n, rss0)
	if err != nil {
		return err
	}
	if err := releaseAndForward(oll, admin, holdID, st.LLMWaiting); err != nil {
		return err
	}
	if err := child.Wait(); err != nil {
		return fmt.Errorf("clients: %v", err)
	}
	return nil
}

// takeBenchHold takes a hold of the GPU through the admin API and returns
// its id.
func takeBenchHold(admin string) (string, error) {
	resp, err := http.Post(admin+"/gpu_turnstile/holds", "application/json", strings.NewReader(`{"owner":"bench","ttl":"10m"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("hold: %v %v", resp, err)
	}
	defer resp.Body.Close()
	var hold struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&hold)
	return hold.ID, nil
}

// waitQueued waits until each of the n requests waits or was answered
// busy, then prints what the waiting costs this process, whose RSS was
// rss0 before the clients came.
func waitQueued(llm, admin string, n int, rss0 int64) (scaleStatus, error) {
	start := time.Now()
	var st scaleStatus
	for st = status(llm); st.LLMWaiting+busyAnswers(admin) < n; st = status(llm) {
		if time.Since(start) > 2*time.Minute {
			return st, fmt.Errorf("only %d of %d requests waiting or answered after 2 minutes", st.LLMWaiting+busyAnswers(admin), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	queued := time.Since(start)
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	rss1 := rss()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	waitingN := st.LLMWaiting
	fmt.Printf("%d LLM requests: %d waiting behind a hold, %d answered busy (settled in %v)\n", n, waitingN, n-waitingN, queued.Round(time.Millisecond))
	fmt.Printf("  process RSS %d MiB -> %d MiB: %.1f KiB per waiting request (Go stacks in use: %d MiB, heap in use: %d MiB)\n",
		rss0>>20, rss1>>20, float64(rss1-rss0)/1024/float64(waitingN), ms.StackInuse>>20, ms.HeapInuse>>20)
	fmt.Printf("  wait buffer: %s of %s held, peak %s\n", humanize.IBytes(uint64(st.WaitBuffer.Bytes)),
		humanize.IBytes(uint64(st.WaitBuffer.Limit)), humanize.IBytes(uint64(st.WaitBuffer.Peak)))
	return st, nil
}

// releaseAndForward ends the hold and waits until the waiting requests
// have reached Ollama.
func releaseAndForward(oll *ollamatest.Server, admin, holdID string, waitingN int) error {
	before := oll.Requests()
	req, _ := http.NewRequest(http.MethodDelete, admin+"/gpu_turnstile/holds/"+holdID, nil)
	released := time.Now()
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("release: %v %v", resp, err)
	}
	for oll.Requests()-before < int64(waitingN) {
		if time.Since(released) > time.Minute {
			return fmt.Errorf("only %d of %d reached Ollama a minute after the release", oll.Requests()-before, waitingN)
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("  all %d forwarded to Ollama %v after the release\n", waitingN, time.Since(released).Round(time.Millisecond))
	return nil
}

type scaleStatus struct {
	LLMWaiting int `json:"llm_waiting"`
	WaitBuffer struct {
		Bytes, Limit, Peak int64
	} `json:"wait_buffer"`
}

func status(llm string) scaleStatus {
	var st scaleStatus
	resp, err := http.Get(llm + "/healthz")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&st)
	return st
}

var overloadSeries = regexp.MustCompile(`(?m)^gpu_turnstile_busy_total\{reason="overload",turnstile="default"\} (\d+)$`)

// busyAnswers is how many requests the turnstile turned away for lack of
// wait budget, from the admin endpoint's /metrics.
func busyAnswers(admin string) int {
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := overloadSeries.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// rss is this process's resident set size, from /proc (Linux).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// runScaleClients is the child: N concurrent requests, each on its own
// connection; it exits once all are answered. A busy answer (503) counts
// as answered.
func runScaleClients(args []string) error {
	fs := newFlags("scale-clients")
	n := fs.Int("n", 10000, "requests")
	url := fs.String("url", "", "target")
	bodySize := fs.String("body", "", "body size")
	fs.Parse(args)
	body := `{"model":"llama3.2","messages":[{"role":"user","content":"hi"}],"stream":false}`
	if *bodySize != "" {
		size, err := humanize.ParseBytes(*bodySize)
		if err != nil {
			return err
		}
		head, tail := `{"model":"llama3.2","stream":false,"messages":[{"role":"user","content":"`, `"}]}`
		body = head + strings.Repeat("a", int(size)-len(head)-len(tail)) + tail
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *n, MaxIdleConns: *n}, Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	var ok, busy, failed atomic.Int64
	for range *n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(*url, "application/json", strings.NewReader(body))
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 503:
				busy.Add(1)
			default:
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("  clients: %d answered 200, %d busy (503), %d failed\n", ok.Load(), busy.Load(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d requests failed", failed.Load())
	}
	return nil
}
