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

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/ollama/ollamatest"
)

// runScale queues N LLM requests behind a hold and measures this process
// (Caddy, the turnstile and the fakes) while they wait; the clients run in
// a child process so that their memory is not counted.
func runScale(args []string) error {
	fs := newFlags("scale")
	n := fs.Int("n", 10000, "waiting LLM requests")
	fs.Parse(args)
	gpu := gputest.New()
	oll, _, llm, _, admin, err := simulated(gpu,
		ollamatest.Options{LoadDelay: time.Millisecond, UnloadDelay: time.Millisecond, Tokens: 1},
		comfytest.Options{}, "llm_wait_timeout 5m")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	resp, err := http.Post(admin+"/gpu_turnstile/holds", "application/json", strings.NewReader(`{"owner":"bench","ttl":"10m"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("hold: %v %v", resp, err)
	}
	var hold struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&hold)
	resp.Body.Close()

	runtime.GC()
	rss0 := rss()
	child := exec.Command(os.Args[0], "scale-clients", "-n", strconv.Itoa(*n), "-url", llm+"/api/chat")
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	start := time.Now()
	for waiting(llm) < *n {
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("only %d of %d requests waiting after 2 minutes", waiting(llm), *n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	queued := time.Since(start)
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	rss1 := rss()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%d LLM requests waiting behind a hold (queued in %v)\n", *n, queued.Round(time.Millisecond))
	fmt.Printf("  process RSS %d MiB -> %d MiB: %.1f KiB per waiting request (Go stacks in use: %d MiB, heap in use: %d MiB)\n",
		rss0>>20, rss1>>20, float64(rss1-rss0)/1024/float64(*n), ms.StackInuse>>20, ms.HeapInuse>>20)

	before := oll.Requests()
	req, _ := http.NewRequest(http.MethodDelete, admin+"/gpu_turnstile/holds/"+hold.ID, nil)
	released := time.Now()
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("release: %v %v", resp, err)
	}
	for oll.Requests()-before < int64(*n) {
		if time.Since(released) > time.Minute {
			return fmt.Errorf("only %d of %d reached Ollama a minute after the release", oll.Requests()-before, *n)
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("  all %d forwarded to Ollama %v after the release\n", *n, time.Since(released).Round(time.Millisecond))
	if err := child.Wait(); err != nil {
		return fmt.Errorf("clients: %v", err)
	}
	return nil
}

func waiting(llm string) int {
	resp, err := http.Get(llm + "/healthz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		LLMWaiting int `json:"llm_waiting"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	return st.LLMWaiting
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
// connection; it exits once all are answered.
func runScaleClients(args []string) error {
	fs := newFlags("scale-clients")
	n := fs.Int("n", 10000, "requests")
	url := fs.String("url", "", "target")
	fs.Parse(args)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *n, MaxIdleConns: *n}, Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	for range *n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(*url, "application/json", strings.NewReader(`{"model":"llama3.2","messages":[{"role":"user","content":"hi"}],"stream":false}`))
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("  clients: %d answered 200, %d failed\n", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d requests failed", failed.Load())
	}
	return nil
}
