package turnstile

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		method, target string
		want           class
	}{
		{"POST", "/api/generate", classLLM},
		{"POST", "/api/chat", classLLM},
		{"POST", "/api/embed", classLLM},
		{"POST", "/api/embeddings", classLLM},
		{"POST", "/v1/chat/completions", classLLM},
		{"POST", "/v1/completions", classLLM},
		{"POST", "/v1/embeddings", classLLM},
		{"POST", "/v1/responses", classLLM},
		{"POST", "/v1/messages", classLLM},
		{"POST", "/v1/audio/transcriptions", classLLM},
		{"POST", "/prompt", classImage},
		{"POST", "/api/prompt", classImage},
		// llama.cpp's own routes: in router mode each loads the model it
		// names, /tokenize too.
		{"POST", "/completion", classLLM},
		{"POST", "/completions", classLLM},
		{"POST", "/chat/completions", classLLM},
		{"POST", "/responses", classLLM},
		{"POST", "/embedding", classLLM},
		{"POST", "/embeddings", classLLM},
		{"POST", "/infill", classLLM},
		{"POST", "/rerank", classLLM},
		{"POST", "/reranking", classLLM},
		{"POST", "/tokenize", classLLM},
		{"POST", "/detokenize", classLLM},
		{"POST", "/apply-template", classLLM},
		{"POST", "/models/load", classLLM},
		{"GET", "/slots?model=qwen3-8b", classLLM},
		{"GET", "/props?model=qwen3-8b&autoload=true", classLLM},
		{"GET", "/slots", classPassthrough},
		{"GET", "/props", classPassthrough},
		{"GET", "/models", classPassthrough},
		{"POST", "/models/unload", classPassthrough},
		{"GET", "/health", classPassthrough},
		// llama-swap loads a model for /upstream/..., whatever the method.
		{"GET", "/upstream/qwen3-8b/health", classLLM},
		{"POST", "/upstream/qwen3-8b/completion", classLLM},
		{"GET", "//upstream/qwen3-8b/", classLLM},
		{"GET", "/upstream", classLLM},
		{"GET", "/upstreams", classPassthrough},
		{"GET", "/running", classPassthrough},
		{"POST", "/api/models/unload", classPassthrough},
		// A1111 and Forge: the answer is the job's end.
		{"POST", "/sdapi/v1/txt2img", classImage},
		{"POST", "/sdapi/v1/img2img", classImage},
		{"POST", "/sdapi/v1/extra-single-image", classImage},
		{"POST", "/sdapi/v1/extra-batch-images", classImage},
		{"POST", "/sdapi/v1/interrogate", classImage},
		{"POST", "/sdapi/v1/options", classImage},
		{"POST", "/SDAPI/V1/TXT2IMG", classImage},
		{"POST", "/sdapi/v1/reload-checkpoint", classImage},
		{"POST", "/sdapi/v1/train/embedding", classImage},
		{"POST", "/sdapi/v1/create/hypernetwork", classImage},
		{"POST", "/v/chat/completions", classLLM},
		{"POST", "/audioapi/v1/tasks/run", classLLM},
		{"GET", "/sdapi/v1/progress", classPassthrough},
		{"GET", "/sdapi/v1/memory", classPassthrough},
		{"POST", "/sdapi/v1/interrupt", classPassthrough},
		{"POST", "/sdapi/v1/unload-checkpoint", classPassthrough},
		{"GET", "/view?filename=model=x.png", classPassthrough},
		// Spellings an upstream might route (or redirect) to a model route.
		{"POST", "//api/chat", classLLM},
		{"POST", "/API/CHAT", classLLM},
		{"POST", "/api/chat/", classLLM},
		{"POST", "/v1/../api/chat", classLLM},
		{"POST", "/api/./generate", classLLM},
		{"POST", "/api%2Fchat", classLLM},
		{"POST", "/%61pi/chat", classLLM},
		{"POST", "/Prompt", classImage},
		{"POST", "/api//prompt", classImage},
		// No GPU.
		{"GET", "/api/chat", classPassthrough},
		{"GET", "/v1/models", classPassthrough},
		{"GET", "/v1/models/llama3.2", classPassthrough},
		{"GET", "/api/ps", classPassthrough},
		{"GET", "/api/tags", classPassthrough},
		{"POST", "/api/show", classPassthrough},
		{"POST", "/api/pull", classPassthrough},
		{"POST", "/api/create", classPassthrough},
		{"DELETE", "/api/delete", classPassthrough},
		{"GET", "/ws", classPassthrough},
		{"GET", "/history/abc", classPassthrough},
		{"GET", "/prompt", classPassthrough},
		{"POST", "/queue", classPassthrough},
		{"POST", "/interrupt", classPassthrough},
		{"POST", "/free", classPassthrough},
		{"POST", "/upload/image", classPassthrough},
		{"GET", "/view?filename=x.png", classPassthrough},
		{"HEAD", "/", classPassthrough},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, "http://x"+tc.target, nil)
		if got := classify(r); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.method, tc.target, got, tc.want)
		}
	}
}

func TestClassifyFastPathDoesNotAllocate(t *testing.T) {
	r := httptest.NewRequest("POST", "http://x/api/chat", nil)
	if n := testing.AllocsPerRun(100, func() { classify(r) }); n != 0 {
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
		got := classify(r)
		clean := strings.ToLower(cleanForCheck(p))
		var want class
		switch {
		case clean == "/api/generate" || clean == "/api/chat" || clean == "/api/embed" || clean == "/api/embeddings":
			want = classLLM
		case strings.HasPrefix(clean, "/v1/"):
			want = classLLM
		case clean == "/prompt" || clean == "/api/prompt":
			want = classImage
		default:
			want = classPassthrough
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
