package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// scene plays chats streaming, an image job arriving, chats waiting, the
// job ending, chats resuming and the warm-up.
func (d *demo) scene() {
	var wg sync.WaitGroup
	m := d.llmKind.models()
	chat := func(name, model string) {
		defer wg.Done()
		d.chat(name, model)
	}
	if m[0] == m[1] {
		d.say("scene: two chats start streaming (both %s)", m[0])
	} else {
		d.say("scene: two chats start streaming (%s and %s)", m[0], m[1])
	}
	wg.Add(2)
	go chat("chat A", m[0])
	go chat("chat B", m[1])
	time.Sleep(1200 * time.Millisecond)

	d.say("scene: an image prompt arrives while the chats stream")
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.imageKind.submit(d)
	}()
	time.Sleep(300 * time.Millisecond)
	d.say("scene: a third chat arrives and has to wait for the image job")
	wg.Add(1)
	go chat("chat C", m[2])
	wg.Wait()
	// Let the LLM engine take the GPU back after the image engine's free
	// (the warm-up, or vLLM's wake) so the timeline shows it.
	llm, image := d.llmKind, d.imageKind
	d.gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		freed := gputest.Index(ev, 0, image.Service, image.Marks.Freed)
		return freed >= 0 && gputest.Index(ev, freed, llm.Service, llm.Marks.Resumed) >= 0 || d.stateIs("idle")
	})
	time.Sleep(1500 * time.Millisecond)
}

// chat streams one chat and reports its first token (the first line of
// the stream) and its end.
func (d *demo) chat(name, model string) {
	start := time.Now()
	path, body := d.llmKind.chat(model, "hello")
	resp, err := http.Post(d.llm+path, "application/json", strings.NewReader(body))
	if err != nil {
		d.say("%s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err == nil {
		d.say("%s: first token after %.2fs (status %d)", name, time.Since(start).Seconds(), resp.StatusCode)
	}
	io.Copy(io.Discard, br)
	d.say("%s: done after %.2fs", name, time.Since(start).Seconds())
}
