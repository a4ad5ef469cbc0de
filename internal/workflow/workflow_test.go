package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// sdxl is ComfyUI's default text-to-image workflow in API form, as the UI posts it to /prompt,
// with an SDXL checkpoint. seed, text and batch vary; width is put in as written (a number
// or a link).
func sdxl(seed int, text string, width string, batch int) string {
	return fmt.Sprintf(`{
  "client_id": "5c0d6a3e9f3b4f0c8a3f2f8e1d2c3b4a",
  "prompt": {
    "3": {"class_type": "KSampler", "inputs": {"seed": %d, "steps": 20, "cfg": 8, "sampler_name": "euler", "scheduler": "normal", "denoise": 1,
          "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}, "_meta": {"title": "KSampler"}},
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd_xl_base_1.0.safetensors"}, "_meta": {"title": "Load Checkpoint"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": %s, "height": 1024, "batch_size": %d}, "_meta": {"title": "Empty Latent Image"}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": %q, "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "text, watermark", "clip": ["4", 1]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}}
  },
  "extra_data": {"extra_pnginfo": {"workflow": {"last_node_id": 9, "nodes": [{"id": 4, "type": "CheckpointLoaderSimple", "widgets_values": ["sd_xl_base_1.0.safetensors"]}]}}}
}`, seed, width, batch, text)
}

// flux is a Flux dev workflow: a UNET, two text encoders and a VAE loaded apart, into an SD3 latent.
const flux = `{"prompt": {
  "6":  {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat holding a sign that says hello world", "clip": ["11", 0]}},
  "8":  {"class_type": "VAEDecode", "inputs": {"samples": ["13", 0], "vae": ["10", 0]}},
  "9":  {"class_type": "SaveImage", "inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}},
  "10": {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}},
  "11": {"class_type": "DualCLIPLoader", "inputs": {"clip_name1": "t5xxl_fp16.safetensors", "clip_name2": "clip_l.safetensors", "type": "flux"}},
  "12": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux1-dev.safetensors", "weight_dtype": "default"}},
  "13": {"class_type": "SamplerCustomAdvanced", "inputs": {"noise": ["25", 0], "guider": ["22", 0], "sampler": ["16", 0], "sigmas": ["17", 0], "latent_image": ["27", 0]}},
  "16": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
  "17": {"class_type": "BasicScheduler", "inputs": {"scheduler": "simple", "steps": 20, "denoise": 1, "model": ["12", 0]}},
  "22": {"class_type": "BasicGuider", "inputs": {"model": ["12", 0], "conditioning": ["6", 0]}},
  "25": {"class_type": "RandomNoise", "inputs": {"noise_seed": 219670278747233}},
  "27": {"class_type": "EmptySD3LatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1}}
}}`

// lora is the default workflow with a LoRA between the checkpoint and the sampler, and a
// separate VAE.
const lora = `{"prompt": {
  "3":  {"class_type": "KSampler", "inputs": {"seed": 1, "steps": 25, "cfg": 7, "sampler_name": "dpmpp_2m", "scheduler": "karras", "denoise": 1,
         "model": ["10", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
  "4":  {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "SDXL/juggernautXL_v9.safetensors"}},
  "5":  {"class_type": "EmptyLatentImage", "inputs": {"width": 832, "height": 1216, "batch_size": 2}},
  "6":  {"class_type": "CLIPTextEncode", "inputs": {"text": "portrait", "clip": ["10", 1]}},
  "7":  {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["10", 1]}},
  "8":  {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["11", 0]}},
  "9":  {"class_type": "SaveImage", "inputs": {"filename_prefix": "lora", "images": ["8", 0]}},
  "10": {"class_type": "LoraLoader", "inputs": {"lora_name": "add_detail.safetensors", "strength_model": 0.8, "strength_clip": 0.8, "model": ["4", 0], "clip": ["4", 1]}},
  "11": {"class_type": "VAELoader", "inputs": {"vae_name": "sdxl_vae.safetensors"}}
}}`

// hunyuan is a video workflow: its latent has a length.
const hunyuan = `{"prompt": {
  "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "hunyuan_video_t2v_720p_bf16.safetensors", "weight_dtype": "default"}},
  "2": {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 848, "height": 480, "length": 73, "batch_size": 1}}
}}`

func TestSignature(t *testing.T) {
	tests := []struct {
		name, kind, path, body, want string
	}{
		{"comfyui sdxl default", "comfyui", "/prompt", sdxl(156680208700286, "beautiful scenery", "1024", 1),
			"comfyui:sd_xl_base_1.0.safetensors@1024x1024x1"},
		{"comfyui /api/prompt", "comfyui", "/api/prompt", sdxl(1, "x", "1024", 1),
			"comfyui:sd_xl_base_1.0.safetensors@1024x1024x1"},
		{"comfyui flux", "comfyui", "/prompt", flux,
			"comfyui:ae.safetensors+clip_l.safetensors+flux1-dev.safetensors+t5xxl_fp16.safetensors@1024x1024x1"},
		{"comfyui lora and vae", "comfyui", "/prompt", lora,
			"comfyui:SDXL/juggernautXL_v9.safetensors+add_detail.safetensors+sdxl_vae.safetensors@832x1216x2"},
		{"comfyui width is a link", "comfyui", "/prompt", sdxl(1, "x", `["12", 0]`, 1),
			"comfyui:sd_xl_base_1.0.safetensors@?x1024x1"},
		{"comfyui width written as a float", "comfyui", "/prompt", sdxl(1, "x", "1024.0", 1),
			"comfyui:sd_xl_base_1.0.safetensors@1024x1024x1"},
		{"comfyui video latent has a length", "comfyui", "/prompt", hunyuan,
			"comfyui:hunyuan_video_t2v_720p_bf16.safetensors@848x480x1x73"},
		{"comfyui two latents, sorted", "comfyui", "/prompt", `{"prompt": {
			"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 768, "height": 768, "batch_size": 1}},
			"2": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 4}},
			"3": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5.safetensors"}},
			"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5.safetensors"}}}}`,
			"comfyui:v1-5.safetensors@512x512x4@768x768x1"},
		{"comfyui latent with every size linked counts no size", "comfyui", "/prompt", `{"prompt": {
			"1": {"class_type": "EmptyLatentImage", "inputs": {"width": ["9", 0], "height": ["9", 1], "batch_size": ["9", 2]}},
			"2": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5.safetensors"}}}}`,
			"comfyui:v1-5.safetensors"},
		{"comfyui only a latent", "comfyui", "/prompt", `{"prompt": {"5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}}}}`,
			"comfyui:@512x512x1"},
		{"comfyui no model nor latent", "comfyui", "/prompt", `{"prompt":{"1":{"class_type":"ImageBlur","inputs":{"blur_radius":40}},"9":{"class_type":"PreviewImage"}}}`, ""},
		{"comfyui only samplers named", "comfyui", "/prompt", `{"prompt":{"16":{"class_type":"KSamplerSelect","inputs":{"sampler_name":"euler"}}}}`, ""},
		{"comfyui no prompt", "comfyui", "/prompt", `{"client_id": "x"}`, ""},
		{"comfyui prompt not an object", "comfyui", "/prompt", `{"prompt": [1, 2]}`, ""},
		{"comfyui nodes not objects skipped", "comfyui", "/prompt", `{"prompt": {"1": 7, "2": null, "3": {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}}}}`,
			"comfyui:ae.safetensors"},
		{"comfyui other path", "comfyui", "/queue", sdxl(1, "x", "1024", 1), ""},
		{"comfyui truncated", "comfyui", "/prompt", sdxl(1, "x", "1024", 1)[:300], ""},
		{"comfyui trailing garbage", "comfyui", "/prompt", sdxl(1, "x", "1024", 1) + "}", ""},

		{"a1111 txt2img defaults", "a1111", "/sdapi/v1/txt2img", `{"prompt": "a cat", "steps": 20}`, "a1111:current@512x512x1"},
		{"a1111 txt2img sizes", "a1111", "/sdapi/v1/txt2img",
			`{"prompt": "a cat", "negative_prompt": "", "seed": -1, "steps": 30, "width": 1024, "height": 768, "batch_size": 2, "n_iter": 4, "cfg_scale": 7}`,
			"a1111:current@1024x768x2"},
		{"a1111 txt2img override checkpoint", "a1111", "/sdapi/v1/txt2img",
			`{"prompt": "a cat", "width": 1024, "height": 1024, "override_settings": {"sd_model_checkpoint": "sd_xl_base_1.0.safetensors [31e35c80fc]", "CLIP_stop_at_last_layers": 2}}`,
			"a1111:sd_xl_base_1.0.safetensors [31e35c80fc]@1024x1024x1"},
		{"a1111 txt2img empty override", "a1111", "/sdapi/v1/txt2img", `{"override_settings": {}, "override_settings_restore_afterwards": true}`,
			"a1111:current@512x512x1"},
		{"a1111 txt2img hires default scale", "a1111", "/sdapi/v1/txt2img",
			`{"prompt": "a cat", "enable_hr": true, "hr_upscaler": "Latent", "denoising_strength": 0.7}`,
			"a1111:current@512x512x1+hr2"},
		{"a1111 txt2img hires scale and checkpoint", "a1111", "/sdapi/v1/txt2img",
			`{"prompt": "a cat", "width": 832, "height": 1216, "enable_hr": true, "hr_scale": 1.5, "override_settings": {"sd_model_checkpoint": "juggernautXL_v9"}}`,
			"a1111:juggernautXL_v9@832x1216x1+hr1.5"},
		{"a1111 txt2img hires to a size", "a1111", "/sdapi/v1/txt2img",
			`{"width": 512, "height": 512, "enable_hr": true, "hr_scale": 2, "hr_resize_x": 1536, "hr_resize_y": 0}`,
			"a1111:current@512x512x1+hr1536x0"},
		{"a1111 txt2img hires off ignores scale", "a1111", "/sdapi/v1/txt2img", `{"enable_hr": false, "hr_scale": 4}`, "a1111:current@512x512x1"},
		{"a1111 img2img", "a1111", "/sdapi/v1/img2img",
			`{"init_images": ["iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="], "denoising_strength": 0.5, "width": 768, "height": 768}`,
			"a1111:current@768x768x1"},
		{"a1111 extras single", "a1111", "/sdapi/v1/extra-single-image", `{"image": "iVBORw0KGgo=", "upscaling_resize": 4, "upscaler_1": "R-ESRGAN 4x+"}`,
			"a1111:extras:R-ESRGAN 4x+"},
		{"a1111 extras batch without upscaler", "a1111", "/sdapi/v1/extra-batch-images", `{"imageList": []}`, "a1111:extras:None"},
		{"a1111 other path", "a1111", "/sdapi/v1/options", `{"sd_model_checkpoint": "x"}`, ""},
		{"a1111 null body", "a1111", "/sdapi/v1/txt2img", `null`, ""},
		{"a1111 array body", "a1111", "/sdapi/v1/txt2img", `[{"width": 512}]`, ""},
		{"a1111 truncated", "a1111", "/sdapi/v1/img2img", `{"width": 768, "init_images": ["iVBORw0KGgoAAAANSUhEUgAAAA`, ""},

		{"garbage", "comfyui", "/prompt", "\x89PNG\r\n\x1a\n garbage", ""},
		{"empty body", "comfyui", "/prompt", "", ""},
		{"empty a1111 body", "a1111", "/sdapi/v1/txt2img", "", ""},
		{"unknown kind", "ollama", "/prompt", sdxl(1, "x", "1024", 1), ""},
		{"empty kind", "", "/sdapi/v1/txt2img", `{}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Signature(tt.kind, tt.path, []byte(tt.body)); got != tt.want {
				t.Errorf("Signature(%q, %q) = %q, want %q", tt.kind, tt.path, got, tt.want)
			}
		})
	}
}

// What does not change the memory (seed, prompt text) does not change the key; what does
// (batch size) does.
func TestSignatureKeepsWhatDecidesMemory(t *testing.T) {
	a := Signature("comfyui", "/prompt", []byte(sdxl(1, "a castle on a hill", "1024", 1)))
	b := Signature("comfyui", "/prompt", []byte(sdxl(987654321, "a lighthouse at dusk, \"oil\" painting", "1024", 1)))
	c := Signature("comfyui", "/prompt", []byte(sdxl(1, "a castle on a hill", "1024", 4)))
	if a == "" || a != b {
		t.Errorf("seed and prompt text changed the signature: %q, %q", a, b)
	}
	if c == "" || c == a {
		t.Errorf("batch size did not change the signature: %q, %q", a, c)
	}

	x := Signature("a1111", "/sdapi/v1/txt2img", []byte(`{"prompt": "a cat", "seed": 1, "width": 768, "batch_size": 2}`))
	y := Signature("a1111", "/sdapi/v1/txt2img", []byte(`{"batch_size": 2, "seed": 42, "width": 768, "prompt": "a dog", "n_iter": 8}`))
	if x != y {
		t.Errorf("seed, prompt, n_iter or key order changed the signature: %q, %q", x, y)
	}
}

func TestSignatureLongIsBounded(t *testing.T) {
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf(`"%d": {"class_type": "LoraLoader", "inputs": {"lora_name": "a_rather_long_lora_file_name_number_%02d.safetensors"}}`, i, i))
	}
	body := `{"prompt": {` + strings.Join(nodes, ",") + `, "x": {"class_type": "EmptyLatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1}}}}`
	got := Signature("comfyui", "/prompt", []byte(body))
	if len(got) != 480+1+16 {
		t.Fatalf("len = %d, want %d: %q", len(got), 480+1+16, got)
	}
	if !strings.HasPrefix(got, "comfyui:a_rather_long_lora_file_name_number_00.safetensors+") {
		t.Errorf("cut signature does not start with the whole one's start: %q", got)
	}

	// The hash is over the whole signature: two that differ only past the cut differ.
	var full strings.Builder
	full.WriteString("comfyui:")
	for i := range 40 {
		if i > 0 {
			full.WriteByte('+')
		}
		fmt.Fprintf(&full, "a_rather_long_lora_file_name_number_%02d.safetensors", i)
	}
	full.WriteString("@1024x1024x1")
	sum := sha256.Sum256([]byte(full.String()))
	if want := full.String()[:480] + "~" + hex.EncodeToString(sum[:])[:16]; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	other := Signature("comfyui", "/prompt", []byte(strings.Replace(body, `"batch_size": 1`, `"batch_size": 2`, 1)))
	if other == got || len(other) != len(got) {
		t.Errorf("a change past the cut did not change the key: %q", other)
	}

	// Exactly maxLen bytes is kept whole.
	name := strings.Repeat("m", maxLen-len("a1111:extras:"))
	if got := Signature("a1111", "/sdapi/v1/extra-single-image", []byte(`{"upscaler_1": "`+name+`"}`)); got != "a1111:extras:"+name {
		t.Errorf("a %d-byte signature was changed: %q", maxLen, got)
	}
}

func BenchmarkSignatureComfy(b *testing.B) {
	body := []byte(flux)
	b.ReportAllocs()
	for b.Loop() {
		Signature("comfyui", "/prompt", body)
	}
}

func BenchmarkSignatureImg2img(b *testing.B) {
	body := []byte(`{"width": 768, "height": 768, "init_images": ["` + strings.Repeat("A", 4<<20) + `"]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		Signature("a1111", "/sdapi/v1/img2img", body)
	}
}
