package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// fastUpstream answers at once, so what is measured is the proxy.
func fastUpstream() *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/ps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"models":[]}`)
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"models":[{"name":"llama3.2:latest"}]}`)
	})
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"llama3.2:latest","message":{"role":"assistant","content":"ok"},"done":true}`)
	})
	mux.HandleFunc("POST /api/generate", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 5 {
			fmt.Fprintf(w, `{"response":"tok%d","done":false}`+"\n", i)
			http.NewResponseController(w).Flush()
			time.Sleep(time.Millisecond)
		}
		io.WriteString(w, `{"response":"","done":true}`+"\n")
	})
	return httptest.NewServer(mux)
}

type abResult struct {
	n         int
	elapsed   time.Duration
	latencies []time.Duration
}

func (r abResult) rps() float64 { return float64(r.n) / r.elapsed.Seconds() }

// add folds one round's result into an accumulated one.
func (r *abResult) add(res abResult) {
	r.n += res.n
	r.elapsed += res.elapsed
	r.latencies = append(r.latencies, res.latencies...)
}

// abClass is a kind of request the A/B comparison hammers.
type abClass struct {
	name, method, path, body string
}

var abClasses = []abClass{
	{"LLM (POST /api/chat, lock taken)", "POST", "/api/chat", `{"model":"llama3.2","messages":[],"stream":false}`},
	{"passthrough (GET /api/tags)", "GET", "/api/tags", ""},
}

// runAB compares Caddy with the turnstile (A) against plain reverse_proxy
// (B) on the same fast upstream: throughput and latency per request class,
// then streaming time to first token.
func runAB(args []string) error {
	fs := newFlags("ab")
	rounds := fs.Int("rounds", 6, "alternating A/B rounds per class")
	dur := fs.Duration("duration", 2*time.Second, "length of one round")
	conc := fs.Int("c", 16, "concurrent clients")
	ttftN := fs.Int("ttft", 300, "streaming requests for time to first token, per side")
	fs.Parse(args)

	up := fastUpstream()
	defer up.Close()
	admin, pa, pb := freePort(), freePort(), freePort()
	if err := loadCaddy(abConfig(admin, pa, pb, up.URL)); err != nil {
		return err
	}
	a, b := localURL(pa), localURL(pb)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 2048}}

	fmt.Printf("A = Caddy + gpu_turnstile + reverse_proxy, B = Caddy + reverse_proxy; %d clients, %d rounds of %v, alternating\n\n", *conc, *rounds, *dur)
	for _, class := range abClasses {
		ra, rb := abRounds(client, a, b, class, *conc, *dur, *rounds)
		printABClass(class.name, ra, rb)
	}
	ta, tb, err := abFirstTokens(client, a, b, *ttftN)
	if err != nil {
		return err
	}
	printFirstTokens(*ttftN, ta, tb)
	return nil
}

// abConfig is the Caddyfile for the comparison: the turnstile's listener
// on pa, the plain proxy on pb, both in front of upstream.
func abConfig(admin, pa, pb int, upstream string) string {
	return fmt.Sprintf(`{`+globalOpts+`
	gpu_turnstile {
		ollama %s
	}
}
:%d {
	bind 127.0.0.1
	gpu_turnstile
	reverse_proxy %s {
		flush_interval -1
	}
}
:%d {
	bind 127.0.0.1
	reverse_proxy %s {
		flush_interval -1
	}
}
`, admin, upstream, pa, upstream, pb, upstream)
}

// abRounds hammers a and b with class for the given rounds, swapping which
// goes first each round so that neither side always runs warm.
func abRounds(client *http.Client, a, b string, class abClass, conc int, dur time.Duration, rounds int) (ra, rb abResult) {
	for round := range rounds {
		order := []string{a, b}
		if round%2 == 1 {
			order = []string{b, a}
		}
		for _, target := range order {
			res := hammer(client, target, class.method, class.path, class.body, conc, dur)
			acc := &ra
			if target == b {
				acc = &rb
			}
			acc.add(res)
		}
	}
	return ra, rb
}

// printABClass reports one class: each side's throughput and latency, and
// what the turnstile costs.
func printABClass(name string, ra, rb abResult) {
	sortAll(ra.latencies, rb.latencies)
	fmt.Printf("%s\n", name)
	fmt.Printf("  A: %8.0f req/s  p50 %s  p99 %s\n", ra.rps(), ms(percentile(ra.latencies, .5)), ms(percentile(ra.latencies, .99)))
	fmt.Printf("  B: %8.0f req/s  p50 %s  p99 %s\n", rb.rps(), ms(percentile(rb.latencies, .5)), ms(percentile(rb.latencies, .99)))
	fmt.Printf("  throughput ratio A/B %.3f, added p99 %s\n\n", ra.rps()/rb.rps(),
		ms(percentile(ra.latencies, .99)-percentile(rb.latencies, .99)))
}

// abFirstTokens times the first token of n streams on each side, A and B
// interleaved one by one.
func abFirstTokens(client *http.Client, a, b string, n int) (ta, tb []time.Duration, err error) {
	for i := range n * 2 {
		target := a
		if i%2 == 1 {
			target = b
		}
		d, err := firstToken(client, target+"/api/generate")
		if err != nil {
			return nil, nil, err
		}
		if target == a {
			ta = append(ta, d)
		} else {
			tb = append(tb, d)
		}
	}
	return ta, tb, nil
}

// printFirstTokens reports time to first token on each side and the
// turnstile's addition to the median.
func printFirstTokens(n int, ta, tb []time.Duration) {
	sortAll(ta, tb)
	fmt.Printf("Streaming time to first token (%d each)\n", n)
	fmt.Printf("  A: p50 %s  p99 %s\n  B: p50 %s  p99 %s\n  added p50 %s\n",
		ms(percentile(ta, .5)), ms(percentile(ta, .99)), ms(percentile(tb, .5)), ms(percentile(tb, .99)),
		ms(percentile(ta, .5)-percentile(tb, .5)))
}

// hammer runs conc clients sending one request after another to base for
// dur, and collects every answered request's latency.
func hammer(client *http.Client, base, method, path, body string, conc int, dur time.Duration) abResult {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return abResult{n: len(all), elapsed: time.Since(start), latencies: all}
}

// firstToken times a streaming generate request to its first line.
func firstToken(client *http.Client, url string) (time.Duration, error) {
	t0 := time.Now()
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"model":"llama3.2","prompt":"hi"}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	io.Copy(io.Discard, br)
	return d, nil
}
