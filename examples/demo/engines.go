package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds/kindstest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// The engines the demo can simulate are the registry's kinds that have a
// fake (kindstest), one LLM kind and one image kind at a time. Each fake
// runs on the shared simulated GPU with delays of the order of the real
// engine's (shortened).

// llmTimings and imageTimings are those delays, in the terms every fake
// maps onto its own (vLLM's wake takes Load, its sleep Unload; a ComfyUI
// free takes Unload, as does A1111's checkpoint unload).
var (
	llmTimings   = engine.FakeOptions{Load: 800 * time.Millisecond, Unload: 300 * time.Millisecond, Tokens: 25, TokenDelay: 60 * time.Millisecond}
	imageTimings = engine.FakeOptions{Job: 3 * time.Second, Load: 500 * time.Millisecond, Unload: 200 * time.Millisecond}
)

// simulated is one simulated engine: its kind and, once started, the
// registry's fake of it, whose marks and routes the scene uses.
type simulated struct {
	kind *engine.Kind
	engine.Fake
}

// start starts the fake of e's kind on gpu with opts.
func (e *simulated) start(gpu *gputest.GPU, opts engine.FakeOptions) {
	e.Fake, _ = kindstest.Start(e.kind.Name, gpu, opts) // parseEngines took kinds with a fake
}

// parseEngines reads -engines: one LLM kind and one image kind, in either
// order.
func parseEngines(s string) (llm, image simulated, err error) {
	var llms, images []*engine.Kind
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		k, ok := kinds.Named(name)
		if _, fake := kindstest.Fakes[name]; !ok || !fake {
			return llm, image, fmt.Errorf("-engines %q: unknown engine kind %q (LLM: %s; image: %s)",
				s, name, choices(engine.ClassLLM), choices(engine.ClassImage))
		}
		if k.Class == engine.ClassLLM {
			llms = append(llms, k)
		} else {
			images = append(images, k)
		}
	}
	if len(llms) != 1 || len(images) != 1 {
		return llm, image, fmt.Errorf("-engines %q: give one LLM kind (%s) and one image kind (%s), e.g. %s",
			s, choices(engine.ClassLLM), choices(engine.ClassImage), defaultEngines())
	}
	return simulated{kind: llms[0]}, simulated{kind: images[0]}, nil
}

// choices are the kinds of class the demo can simulate, for messages.
func choices(class engine.Class) string { return strings.Join(kindstest.Names(class), ", ") }

// defaultEngines is -engines' default: the registry's first LLM kind and
// first image kind with a fake (Ollama and ComfyUI).
func defaultEngines() string {
	return kindstest.Names(engine.ClassLLM)[0] + "," + kindstest.Names(engine.ClassImage)[0]
}

// models are the models of chats A, B and C: two at once where the engine
// serves two, else its one model.
func (e simulated) models() [3]string {
	m := [3]string{e.ChatModel, e.ChatModel, e.ChatModel}
	if e.OtherModel != "" {
		m[1] = e.OtherModel
	}
	return m
}

// warmLine is the Caddyfile's warm_model line for an LLM engine, "" if its
// kind cannot load a model ahead.
func (e simulated) warmLine() string {
	if !e.kind.Warms {
		return ""
	}
	return "warm_model " + e.ChatModel
}

// chat returns the route and body of a streamed chat (Ollama's NDJSON
// lines, or OpenAI's SSE events, both asked for with "stream":true).
func (e simulated) chat(model, content string) (path, body string) {
	return e.ChatPath, fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, model, content)
}

// tryLLM is a curl command line for the LLM site at url.
func (e simulated) tryLLM(url string) string {
	path, body := e.chat(e.ChatModel, "hi")
	return fmt.Sprintf("curl -N %s%s -H 'Content-Type: application/json' -d '%s'", url, path, body)
}

// tryImage is a curl command line for the image site at url.
func (e simulated) tryImage(url string) string {
	return fmt.Sprintf("curl %s%s -H 'Content-Type: application/json' -d '%s'", url, e.JobPath, e.JobBody)
}

// submit sends the scene's image job through the image site, reported
// with d.say: a queued engine's (ComfyUI's) answer is the job's
// acceptance, with its id; a synchronous one's (A1111's) the job's end.
func (e simulated) submit(d *demo) {
	start := time.Now()
	resp, err := http.Post(d.image+e.JobPath, "application/json", strings.NewReader(e.Job()))
	if err != nil {
		d.say("image: %v", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e.kind.JobID == nil {
		d.say("image: %s answered after %.2fs (status %d)", e.kind.Title, time.Since(start).Seconds(), resp.StatusCode)
		return
	}
	id, _ := e.kind.JobID(b)
	d.say("image: %s accepted the job after %.2fs (status %d, id %s)", e.kind.Title, time.Since(start).Seconds(), resp.StatusCode, short(id))
}
