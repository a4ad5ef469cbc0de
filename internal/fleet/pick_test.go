package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

func TestPick(t *testing.T) {
	now := time.Now()
	idle := &Host{State: "idle", LLMUp: true, ImageUp: true}
	warm := &Host{State: "llm", LLMUp: true, ImageUp: true, Models: []string{"qwen"}, LLMInflight: 1}
	rendering := &Host{State: "image", LLMUp: true, ImageUp: true, Models: []string{"qwen"}, ImagePending: true, Workflows: []string{"w1"}}
	imageWaiting := &Host{State: "llm", LLMUp: true, ImageUp: true, Models: []string{"qwen"}, ImageWaiting: 1, ImagePending: true}
	full := &Host{State: "llm", LLMUp: true, ImageUp: true, Models: []string{"big"}, Memory: true, Room: 1 << 30,
		Footprints: map[string]int64{"qwen": 8 << 30}}
	soon := &Host{State: "image", LLMUp: true, ImageUp: true, ImagePending: true, LLMStart: now.Add(time.Second), ImageStart: now.Add(time.Second)}
	late := &Host{State: "image", LLMUp: true, ImageUp: true, ImagePending: true, LLMStart: now.Add(time.Minute), ImageStart: now.Add(time.Minute)}
	ranW1 := &Host{State: "idle", LLMUp: true, ImageUp: true, Workflows: []string{"w1"}}
	lateW1 := &Host{State: "image", LLMUp: true, ImageUp: true, ImagePending: true, ImageStart: now.Add(time.Minute), Workflows: []string{"w1"}}
	noLLM := &Host{State: "idle", ImageUp: true}

	two := func(models ...string) *Host { return &Host{State: "idle", LLMUp: true, ImageUp: true, Models: models} }
	llm := &Request{Class: route.LLM, Model: "qwen"}
	image := &Request{Class: route.Image, Workflow: "w1"}
	pass := &Request{Class: route.Passthrough}
	up := func(hs ...*Host) []Candidate {
		cs := make([]Candidate, len(hs))
		for i, h := range hs {
			cs[i] = Candidate{Host: h, Up: true, Pin: fmt.Sprint("pin", i)}
		}
		return cs
	}
	for _, c := range []struct {
		name string
		q    *Request
		cs   []Candidate
		pin  string
		want int
	}{
		{"llm: the host with the model loaded", llm, up(idle, warm, idle), "", 1},
		{"llm: not while it renders", llm, up(rendering, idle), "", 1},
		{"llm: not while an image job waits", llm, up(imageWaiting, idle), "", 1},
		{"llm: idle before llm with room", llm, up(&Host{State: "llm", LLMUp: true}, idle), "", 1},
		{"llm: room before no room", llm, up(full, &Host{State: "llm", LLMUp: true, Models: []string{"x"}}), "", 1},
		{"llm: no room before busy", llm, up(soon, full), "", 1},
		{"llm: the earliest predicted start", llm, up(late, soon), "", 1},
		{"llm: a prediction before none", llm, up(&Host{State: "hold", LLMUp: true}, late), "", 1},
		{"llm: known before unknown", llm, up(nil, late), "", 1},
		{"llm: no reachable LLM engine counts as unknown", llm, up(noLLM, late), "", 1},
		{"llm: all unknown: fallback", llm, up(nil, nil), "", None},
		{"llm: health checks failed stay out", llm, []Candidate{{Host: warm}, {Host: idle, Up: true}}, "", 1},
		{"llm: fewest in flight among warm ones", llm, up(&Host{State: "llm", LLMUp: true, Models: []string{"qwen"}, LLMInflight: 3}, warm), "", 1},
		{"llm: the pin does not count", llm, up(idle, warm), "pin0", 1},
		{"image: the idle one", image, up(warm, idle), "", 1},
		{"image: the idle one that ran the workflow", image, up(idle, ranW1), "", 1},
		{"image: llm with nothing waiting starts now", image, up(late, warm, warm), "", 1},
		{"image: not the last host free for chats", image, up(soon, warm), "", 0},
		{"image: the last host free for chats before a render that starts later than KeepForChats", image, up(&Host{State: "image", ImageUp: true, LLMUp: true, ImagePending: true, ImageStart: now.Add(time.Hour)}, warm), "", 1},
		{"image: the last host free for chats when it has none to serve", image, up(late, &Host{State: "llm", LLMUp: true, ImageUp: true}), "", 1},
		{"image: the idle host whose models are loaded elsewhere", image,
			up(warm, &Host{State: "idle", LLMUp: true, ImageUp: true, Models: []string{"x"}}, &Host{State: "idle", LLMUp: true, ImageUp: true, Models: []string{"qwen"}}), "", 2},
		{"image: queues behind a render while the others' models would not fit without the host", image,
			[]Candidate{{Host: soon, Up: true}, {Host: two("x", "y"), Up: true, Capacity: 2}, {Host: two("z", "w"), Up: true, Capacity: 2}}, "", 0},
		{"image: takes a host free for chats when the others hold its models", image,
			[]Candidate{{Host: late, Up: true}, {Host: two("x"), Up: true, Capacity: 2}, {Host: two("y"), Up: true, Capacity: 2}}, "", 1},
		{"llm: a model on its way there counts as loaded", llm, []Candidate{{Host: idle, Up: true}, {Host: &Host{State: "llm", LLMUp: true}, Up: true, Sent: true}}, "", 1},
		{"llm: room where nothing is evicted first", llm, up(&Host{State: "idle", LLMUp: true, Models: []string{"x"}}, &Host{State: "llm", LLMUp: true}), "", 1},
		{"llm: evict a model loaded elsewhere before the last copy of one", llm,
			up(&Host{State: "idle", LLMUp: true, Models: []string{"x"}}, &Host{State: "idle", LLMUp: true, Models: []string{"y"}}, &Host{State: "llm", LLMUp: true, Models: []string{"y"}, LLMInflight: 1}), "", 1},
		{"image: the earliest predicted start", image, up(late, soon), "", 1},
		{"image: the one that ran the workflow first", image, up(soon, lateW1), "", 1},
		{"image: its client's host", image, up(idle, rendering), "pin1", 1},
		{"image: a gone pin is placed afresh", image, up(rendering, idle), "pin7", 1},
		{"passthrough: fallback", pass, up(idle, warm), "", None},
		{"passthrough: its client's host", pass, up(idle, warm), "pin1", 1},
		{"passthrough with a client id: placed as an image client", &Request{Class: route.Passthrough, Client: "c"}, up(warm, idle), "", 1},
		{"retry: not the host tried", &Request{Class: route.LLM, Model: "qwen", Tried: 1 << 1}, up(idle, warm), "", 0},
		{"retry: the one tried when it is the only one", &Request{Class: route.LLM, Model: "qwen", Tried: 1}, up(warm), "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := (Policy{Now: now, KeepForChats: 30 * time.Second}).Pick(c.q, c.cs, c.pin); got != c.want {
				t.Errorf("picked %d, want %d", got, c.want)
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	h, err := ParseHost([]byte(`{"state":"image","image_pending":true,"llm_inflight":0,"llm_waiting":2,"image_waiting":1,
		"waiters":[{"kind":"llm","expected_start":"2030-01-01T00:00:10Z"},{"kind":"llm","expected_start":"2030-01-01T00:00:05Z"},
		{"kind":"image","expected_start":"2030-01-01T00:01:00Z"},{"kind":"llm","expected_start":null}],
		"engines":[{"class":"llm","state":"ready","reachable":true,"models":["a","b"]},{"class":"llm","state":"asleep","models":["c"]},
		{"class":"image","state":"running","reachable":true,"last_workflow":"comfyui:w"}],
		"vram":{"free_bytes":10,"reserve_bytes":2,"pending_bytes":3,"stale":false,"footprints":[{"model":"a","bytes":6}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !h.Loaded("a") || !h.Loaded("b") || h.Loaded("c"):
		t.Errorf("models %v: an asleep engine's are not loaded", h.Models)
	case !h.Ran("comfyui:w"):
		t.Errorf("workflows %v", h.Workflows)
	case !h.LLMStart.Equal(time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC)) || !h.ImageStart.Equal(time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC)):
		t.Errorf("starts %v %v", h.LLMStart, h.ImageStart)
	case !h.Memory || h.Room != 5 || h.Fits("a") || !h.Fits("unknown"):
		t.Errorf("memory %v %d %v", h.Memory, h.Room, h.Footprints)
	case !h.LLMUp || !h.ImageUp || !h.blocked():
		t.Errorf("up %v %v blocked %v", h.LLMUp, h.ImageUp, h.blocked())
	}
}

// BenchmarkPick16 is one pick among 16 known upstreams for an LLM request
// whose model one of them has loaded.
func BenchmarkPick16(b *testing.B) {
	cs := make([]Candidate, 16)
	for i := range cs {
		cs[i] = Candidate{Up: true, Pin: fmt.Sprint(i), Host: &Host{State: "llm", LLMUp: true, ImageUp: true,
			Models: []string{"m" + fmt.Sprint(i), "other"}, Memory: true, Room: 1 << 30, Footprints: map[string]int64{"m3": 1 << 20}}}
	}
	q := &Request{Class: route.LLM, Model: "m11"}
	p := Policy{Now: time.Now(), KeepForChats: 30 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if p.Pick(q, cs, "") != 11 {
			b.Fatal("wrong pick")
		}
	}
}

func TestPickWhy(t *testing.T) {
	now := time.Now()
	p := Policy{Now: now, KeepForChats: 30 * time.Second}
	warm := &Host{State: "llm", LLMUp: true, ImageUp: true, Models: []string{"qwen"}}
	idle := &Host{State: "idle", LLMUp: true, ImageUp: true}
	rendering := &Host{State: "image", LLMUp: true, ImageUp: true, ImagePending: true, LLMStart: now.Add(time.Minute)}
	llm := &Request{Class: route.LLM, Model: "qwen"}
	for _, c := range []struct {
		name string
		q    *Request
		cs   []Candidate
		pin  string
		want Why
	}{
		{"loaded", llm, []Candidate{{Host: warm, Up: true}}, "", WhyReady},
		{"room", llm, []Candidate{{Host: idle, Up: true}}, "", WhyRoom},
		{"later", llm, []Candidate{{Host: rendering, Up: true}}, "", WhyLater},
		{"a known one before an unknown one", llm, []Candidate{{Up: true}, {Host: rendering, Up: true}}, "", WhyLater},
		{"no LLM engine up: as unknown", llm, []Candidate{{Host: &Host{State: "idle", ImageUp: true}, Up: true}}, "", WhyUnknown},
		{"all unknown", llm, []Candidate{{Up: true}}, "", WhyFallback},
		{"retry", &Request{Class: route.LLM, Model: "qwen", Tried: 1}, []Candidate{{Host: warm, Up: true}}, "", WhyRetry},
		{"pinned", &Request{Class: route.Image}, []Candidate{{Host: rendering, Up: true, Pin: "p"}}, "p", WhyPinned},
		{"image idle", &Request{Class: route.Image}, []Candidate{{Host: idle, Up: true}}, "", WhyReady},
	} {
		if _, why := p.PickWhy(c.q, c.cs, c.pin); why != c.want {
			t.Errorf("%s: %v, want %v", c.name, why, c.want)
		}
	}
}
