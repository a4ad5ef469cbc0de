package jsonscan

import (
	"strings"
	"testing"
)

// chatBody is a typical Ollama chat body (about 1.5 KiB): a system
// prompt, a few turns, options; "model" first or last.
func chatBody(modelLast bool) string {
	turns := `{"role":"system","content":"You are a helpful assistant. Answer briefly, cite sources when you can, and say so when you do not know.\nUse Markdown for lists and code."},` +
		`{"role":"user","content":"Why is the sky blue? Answer in one paragraph, and explain \"Rayleigh scattering\" in simple words."},` +
		`{"role":"assistant","content":"` + strings.Repeat("The sky looks blue because air molecules scatter short wavelengths more than long ones. ", 8) + `"},` +
		`{"role":"user","content":"And why are sunsets red? Please keep it short."}`
	rest := `"messages":[` + turns + `],"stream":true,"options":{"temperature":0.7,"num_ctx":8192,"top_p":0.9,"stop":["<|eot_id|>"]},"keep_alive":"5m"`
	if modelLast {
		return `{` + rest + `,"model":"llama3.2"}`
	}
	return `{"model":"llama3.2",` + rest + `}`
}

// openAIBody is an OpenAI chat body whose "stream" comes after 80 KiB of
// messages.
func openAIBody() string {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3:8b","messages":[`)
	for i := 0; b.Len() < 80<<10; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"` + strings.Repeat(`Lorem ipsum dolor sit amet, \"consectetur\" adipiscing elit.\n`, 10) + `"}`)
	}
	b.WriteString(`],"temperature":0.2,"stream":true}`)
	return b.String()
}

// comfyBody is a ComfyUI /prompt body whose client_id comes after a
// large workflow (about 64 KiB of nodes).
func comfyBody() string {
	var b strings.Builder
	b.WriteString(`{"prompt":{`)
	for i := 0; b.Len() < 64<<10; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strings.Repeat("1", 1+i%3) + `":{"class_type":"KSampler","inputs":{"seed":156680208700286,"steps":20,"cfg":8.0,"sampler_name":"euler","scheduler":"normal","denoise":1.0,"model":["4",0],"positive":["6",0],"negative":["7",0],"latent_image":["5",0]},"_meta":{"title":"KSampler"}}`)
	}
	b.WriteString(`},"client_id":"5f1a6c1e2b7d4a0c9e3f"}`)
	return b.String()
}

// benchMember reads name from doc with Member, and for comparison with
// encoding/json's decoder (token by token up to the member, as the
// places that now use Member did).
func benchMember(b *testing.B, doc, name string) {
	d := []byte(doc)
	if _, ok := Member(d, name); !ok {
		b.Fatalf("no %q", name)
	}
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(d)))
		b.ReportAllocs()
		for b.Loop() {
			Member(d, name)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(d)))
		b.ReportAllocs()
		for b.Loop() {
			decoderMember(d, name)
		}
	})
}

func BenchmarkChatModelFirst(b *testing.B) { benchMember(b, chatBody(false), "model") }
func BenchmarkChatModelLast(b *testing.B)  { benchMember(b, chatBody(true), "model") }
func BenchmarkOpenAIStream(b *testing.B)   { benchMember(b, openAIBody(), "stream") }
func BenchmarkComfyClientID(b *testing.B)  { benchMember(b, comfyBody(), "client_id") }

// BenchmarkChatModelString is the model read as a string of its own, as
// the status keeps it: the one allocation is the copy.
func BenchmarkChatModelString(b *testing.B) {
	d := []byte(chatBody(false))
	b.ReportAllocs()
	for b.Loop() {
		raw, _ := Member(d, "model")
		String(raw)
	}
}
