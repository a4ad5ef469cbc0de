package config

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		method, target string
		want           route.Class
	}{
		{"POST", "/api/generate", route.LLM},
		{"POST", "/api/chat", route.LLM},
		{"POST", "/api/embed", route.LLM},
		{"POST", "/api/embeddings", route.LLM},
		{"POST", "/v1/chat/completions", route.LLM},
		{"POST", "/v1/completions", route.LLM},
		{"POST", "/v1/embeddings", route.LLM},
		{"POST", "/v1/responses", route.LLM},
		{"POST", "/v1/messages", route.LLM},
		{"POST", "/v1/audio/transcriptions", route.LLM},
		{"POST", "/prompt", route.Image},
		{"POST", "/api/prompt", route.Image},
		// llama.cpp's own routes: in router mode each loads the model it
		// names, /tokenize too.
		{"POST", "/completion", route.LLM},
		{"POST", "/completions", route.LLM},
		{"POST", "/chat/completions", route.LLM},
		{"POST", "/responses", route.LLM},
		{"POST", "/embedding", route.LLM},
		{"POST", "/embeddings", route.LLM},
		{"POST", "/infill", route.LLM},
		{"POST", "/rerank", route.LLM},
		{"POST", "/reranking", route.LLM},
		{"POST", "/tokenize", route.LLM},
		{"POST", "/detokenize", route.LLM},
		{"POST", "/apply-template", route.LLM},
		{"POST", "/models/load", route.LLM},
		{"GET", "/slots?model=qwen3-8b", route.LLM},
		{"GET", "/props?model=qwen3-8b&autoload=true", route.LLM},
		{"GET", "/slots", route.Passthrough},
		{"GET", "/props", route.Passthrough},
		{"GET", "/models", route.Passthrough},
		{"POST", "/models/unload", route.Passthrough},
		{"GET", "/health", route.Passthrough},
		// llama-swap loads a model for /upstream/..., whatever the method.
		{"GET", "/upstream/qwen3-8b/health", route.LLM},
		{"POST", "/upstream/qwen3-8b/completion", route.LLM},
		{"GET", "//upstream/qwen3-8b/", route.LLM},
		{"GET", "/upstream", route.LLM},
		{"GET", "/upstreams", route.Passthrough},
		{"GET", "/running", route.Passthrough},
		{"POST", "/api/models/unload", route.Passthrough},
		// A1111 and Forge: the answer is the job's end.
		{"POST", "/sdapi/v1/txt2img", route.Image},
		{"POST", "/sdapi/v1/img2img", route.Image},
		{"POST", "/sdapi/v1/extra-single-image", route.Image},
		{"POST", "/sdapi/v1/extra-batch-images", route.Image},
		{"POST", "/sdapi/v1/interrogate", route.Image},
		{"POST", "/sdapi/v1/options", route.Image},
		{"POST", "/SDAPI/V1/TXT2IMG", route.Image},
		{"POST", "/sdapi/v1/reload-checkpoint", route.Image},
		{"POST", "/sdapi/v1/train/embedding", route.Image},
		{"POST", "/sdapi/v1/create/hypernetwork", route.Image},
		{"POST", "/v/chat/completions", route.LLM},
		{"POST", "/audioapi/v1/tasks/run", route.LLM},
		{"GET", "/sdapi/v1/progress", route.Passthrough},
		{"GET", "/sdapi/v1/memory", route.Passthrough},
		{"POST", "/sdapi/v1/interrupt", route.Passthrough},
		{"POST", "/sdapi/v1/unload-checkpoint", route.Passthrough},
		{"GET", "/view?filename=model=x.png", route.Passthrough},
		// Spellings an upstream might route (or redirect) to a model route.
		{"POST", "//api/chat", route.LLM},
		{"POST", "/API/CHAT", route.LLM},
		{"POST", "/api/chat/", route.LLM},
		{"POST", "/v1/../api/chat", route.LLM},
		{"POST", "/api/./generate", route.LLM},
		{"POST", "/api%2Fchat", route.LLM},
		{"POST", "/%61pi/chat", route.LLM},
		{"POST", "/Prompt", route.Image},
		{"POST", "/api//prompt", route.Image},
		// No GPU.
		{"GET", "/api/chat", route.Passthrough},
		{"GET", "/v1/models", route.Passthrough},
		{"GET", "/v1/models/llama3.2", route.Passthrough},
		{"GET", "/api/ps", route.Passthrough},
		{"GET", "/api/tags", route.Passthrough},
		{"POST", "/api/show", route.Passthrough},
		{"POST", "/api/pull", route.Passthrough},
		{"POST", "/api/create", route.Passthrough},
		{"DELETE", "/api/delete", route.Passthrough},
		{"GET", "/ws", route.Passthrough},
		{"GET", "/history/abc", route.Passthrough},
		{"GET", "/prompt", route.Passthrough},
		{"POST", "/queue", route.Passthrough},
		{"POST", "/interrupt", route.Passthrough},
		{"POST", "/free", route.Passthrough},
		{"POST", "/upload/image", route.Passthrough},
		{"GET", "/view?filename=x.png", route.Passthrough},
		{"HEAD", "/", route.Passthrough},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, "http://x"+tc.target, nil)
		if got := Routes.Classify(r); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.method, tc.target, got, tc.want)
		}
	}
}

func TestClassifyFastPathDoesNotAllocate(t *testing.T) {
	r := httptest.NewRequest("POST", "http://x/api/chat", nil)
	if n := testing.AllocsPerRun(100, func() { Routes.Classify(r) }); n != 0 {
		t.Fatalf("%v allocations per classification of a clean path", n)
	}
}

// FuzzClassify checks that no spelling of a model route escapes: any path
// that cleans (as Ollama's and ComfyUI's routers would) to a model route,
// ignoring case, is classified as that route.
func FuzzClassify(f *testing.F) {
	for _, p := range []string{"/api/chat", "//api/chat", "/v1/../api/generate", "/API/EMBED", "/prompt/", "/x/../api/prompt"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		u := &url.URL{Path: p}
		r := &http.Request{Method: http.MethodPost, URL: u}
		got := Routes.Classify(r)
		clean := strings.ToLower(cleanForCheck(p))
		var want route.Class
		switch {
		case clean == "/api/generate" || clean == "/api/chat" || clean == "/api/embed" || clean == "/api/embeddings":
			want = route.LLM
		case strings.HasPrefix(clean, "/v1/"):
			want = route.LLM
		case clean == "/prompt" || clean == "/api/prompt":
			want = route.Image
		default:
			want = route.Passthrough
		}
		if got != want {
			t.Fatalf("%q (clean %q): %v, want %v", p, clean, got, want)
		}
	})
}

// cleanForCheck is path.Clean written out independently, for the fuzzer.
func cleanForCheck(p string) string {
	var out []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// With engine_routes, only the engine's kind's routes are guarded: a
// POST /prompt to Ollama is no image job, a chat to ComfyUI no LLM work.
func TestEngineRoutesClassify(t *testing.T) {
	llm, image, pass := route.LLM, route.Image, route.Passthrough
	for _, tc := range []struct {
		routes route.EngineRoutes
		method string
		path   string
		want   route.Class
	}{
		{route.EngineRoutes{}, "POST", "/prompt", image},
		{route.EngineRoutes{Kind: "ollama", LLM: true}, "POST", "/api/chat", llm},
		{route.EngineRoutes{Kind: "ollama", LLM: true}, "POST", "/v1/chat/completions", llm},
		{route.EngineRoutes{Kind: "ollama", LLM: true}, "POST", "/prompt", pass},
		{route.EngineRoutes{Kind: "ollama", LLM: true}, "POST", "/sdapi/v1/txt2img", pass},
		{route.EngineRoutes{Kind: "ollama", LLM: true}, "GET", "/api/tags", pass},
		{route.EngineRoutes{Kind: "llamaswap", LLM: true}, "POST", "/sdapi/v1/txt2img", llm},
		{route.EngineRoutes{Kind: "llamaswap", LLM: true}, "GET", "/upstream/m/health", llm},
		{route.EngineRoutes{Kind: "comfyui"}, "POST", "/api/prompt", image},
		{route.EngineRoutes{Kind: "comfyui"}, "POST", "/api/chat", pass},
		{route.EngineRoutes{Kind: "comfyui"}, "POST", "/sdapi/v1/txt2img", pass},
		{route.EngineRoutes{Kind: "a1111"}, "POST", "/sdapi/v1/txt2img", image},
		{route.EngineRoutes{Kind: "a1111"}, "POST", "/prompt", pass},
		{route.EngineRoutes{Kind: "a1111"}, "POST", "/v1/completions", pass},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		c := Routes.Classify(r)
		if tc.routes.Kind != "" {
			c = Routes.Restrict(tc.routes, c, r)
		}
		if c != tc.want {
			t.Errorf("%s %s on %+v: %v, want %v", tc.method, tc.path, tc.routes, c, tc.want)
		}
	}
}

// The job routes an LLM kind serves are known as LLM work (A1111's, which
// llama-swap serves); ComfyUI's are not.
func TestServedAsLLM(t *testing.T) {
	for p, want := range map[string]bool{"/sdapi/v1/txt2img": true, "/prompt": false, "/api/chat": false} {
		if got := Routes.ServedAsLLM(p); got != want {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
}
