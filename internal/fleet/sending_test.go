package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

func TestSentModels(t *testing.T) {
	now := time.Now()
	f := &Follower{}
	q := &Request{Class: route.LLM, Model: "qwen"}
	if f.Sending("qwen", now) {
		t.Fatal("a model never sent counts as sent")
	}
	q.SentTo(f, now)
	if !f.Sending("qwen", now.Add(time.Hour)) {
		t.Error("a model in flight does not count, however long its request")
	}
	before := time.Now()
	q.Done()
	ended := time.Now() // it ended between the two
	if !f.Sending("qwen", before.Add(settleFor-time.Millisecond)) || f.Sending("qwen", ended.Add(settleFor)) {
		t.Error("a served model counts for settleFor after its request ended, not longer")
	}

	refused, g := &Request{Class: route.LLM, Model: "llama"}, &Follower{}
	refused.SentTo(f, now)
	refused.SentTo(g, now) // f refused it: tried again on g
	if f.Sending("llama", now) {
		t.Error("a model the host refused counts as sent there")
	}
	if !g.Sending("llama", now) {
		t.Error("the retry's host does not count the model")
	}
	(&Request{Class: route.Image, Model: "x"}).SentTo(f, now)
	if f.Sending("x", now) {
		t.Error("an image request counts as a model sent")
	}
}

func TestSentModelsBounded(t *testing.T) {
	now := time.Now()
	f := &Follower{}
	for i := range maxSending + 4 {
		q := &Request{Class: route.LLM, Model: fmt.Sprint("m", i)}
		q.SentTo(f, now)
		q.Done()
	}
	if n := len(f.sent.models); n != maxSending {
		t.Errorf("%d models remembered, want %d", n, maxSending)
	}
	if f.Sending("m0", now) || !f.Sending(fmt.Sprint("m", maxSending+3), now) {
		t.Error("not the oldest forgotten first")
	}
}
