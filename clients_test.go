package turnstile

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	ollamaapi "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Real clients, through Caddy and the turnstile, against the fakes.

func TestOllamaGoClientThroughTheTurnstile(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	base, _ := url.Parse(h.llm)
	c := ollamaapi.NewClient(base, h.client)
	ctx := context.Background()

	var chunks int
	var done bool
	err := c.Chat(ctx, &ollamaapi.ChatRequest{Model: "llama3.2", Messages: []ollamaapi.Message{{Role: "user", Content: "hi"}}},
		func(r ollamaapi.ChatResponse) error {
			chunks++
			done = done || r.Done
			return nil
		})
	if err != nil || chunks < 2 || !done {
		t.Fatalf("chat: %d chunks, done %v, err %v; want a stream", chunks, done, err)
	}
	var gen strings.Builder
	if err := c.Generate(ctx, &ollamaapi.GenerateRequest{Model: "qwen3:8b", Prompt: "hi"}, func(r ollamaapi.GenerateResponse) error {
		gen.WriteString(r.Response)
		return nil
	}); err != nil || gen.Len() == 0 {
		t.Fatalf("generate: %q %v", gen.String(), err)
	}
	emb, err := c.Embed(ctx, &ollamaapi.EmbedRequest{Model: "nomic-embed-text", Input: "hi"})
	if err != nil || len(emb.Embeddings) != 1 {
		t.Fatalf("embed: %+v %v", emb, err)
	}
	running, err := c.ListRunning(ctx)
	if err != nil || len(running.Models) != 3 {
		t.Fatalf("ps through the proxy: %+v %v", running, err)
	}
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitIdle()
}

func TestOpenAIGoClientThroughTheTurnstile(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "llm_busy_mode reject\nllm_busy_status 429"})
	c := openai.NewClient(option.WithBaseURL(h.llm+"/v1/"), option.WithAPIKey("unused"),
		option.WithHTTPClient(h.client), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "llama3.2", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || !strings.Contains(text.String(), "tok0") {
		t.Fatalf("stream: %q %v", text.String(), err)
	}
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "nomic-embed-text", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil || len(emb.Data) != 1 {
		t.Fatalf("embeddings: %v", err)
	}

	// While the GPU is held, the client gets a proper API error with the
	// status and Retry-After the router behind it can act on.
	hold := h.takeHold(t, "test", "1m")
	_, err = c.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "gpu_busy" {
		t.Fatalf("busy answer: %v", err)
	}
	if apiErr.Response.Header.Get("Retry-After") != "30" {
		t.Fatalf("Retry-After %q", apiErr.Response.Header.Get("Retry-After"))
	}
	h.releaseHold(t, hold)
	h.waitIdle()
}
