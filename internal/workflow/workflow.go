// Package workflow names what in an image job decides how much video memory it takes.
//
// Key, over what NodeGraph (ComfyUI) or Generation and Upscale (Automatic1111/Forge) read
// of a job's JSON body, is a short, stable key: the models the job loads and the size of
// the images it makes, and nothing that does not change the memory peak (seeds, prompt
// text, sampler steps, client
// ids). Two jobs with the same key are expected to peak at the same video memory, so the
// key is what a learned memory peak is stored under.
//
// The formats are:
//
//	KIND:MODEL+MODEL...@WxHxB[xL]@WxHxB[xL]...   (a node graph)
//	KIND:CHECKPOINT@WxHxB[+hrSCALE | +hrXxY]    (a generation)
//	KIND:extras:UPSCALER                        (an upscale)
//
// For ComfyUI, the models are the sorted, unique string values of the graph's inputs
// named *_name or *_nameN (sampler_name aside), and each empty latent node (Empty*Latent*)
// adds its width, height, batch size and, for a video, length, "?" standing for a value
// linked from another node. For A1111, CHECKPOINT is override_settings.sd_model_checkpoint
// or "current", sizes default to 512x512x1, and hires appends its scale (default 2) or
// the size it resizes to. Numbers are written canonically (1024.0 is 1024).
//
// A key longer than 512 bytes is cut to 480 bytes, followed by "~" and the first 16
// hex digits of the SHA-256 of the whole key.
package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
)

// maxLen is the longest signature Signature returns.
const maxLen = 512

// cutLen is how much of an over-long signature is kept before its hash.
const cutLen = 480

// Key returns the key under which an image job's memory peak is learned: kind, ":", and
// sig, what in the job decides how much video memory it takes (NodeGraph, Generation,
// Upscale, as the engine's kind reads its jobs). It returns "" for an empty sig: a job that
// could not be read counts as never measured.
func Key(kind, sig string) string {
	if sig == "" {
		return ""
	}
	return bound(kind + ":" + sig)
}

// bound keeps a signature within maxLen bytes: a longer one is cut and its hash appended,
// so two long signatures that share their first 480 bytes still differ.
func bound(sig string) string {
	if len(sig) <= maxLen {
		return sig
	}
	sum := sha256.Sum256([]byte(sig))
	return sig[:cutLen] + "~" + hex.EncodeToString(sum[:8])
}

// decode reads body, which must hold exactly one JSON object, into v. v's fields are
// json.RawMessage: what they do not name (a UI workflow, base64 images) is checked and
// skipped, never copied.
func decode(body []byte, v any) bool {
	// A job is an object: null, an array or a bare value is not one (null would decode
	// into v without an error and read as a job with every field at its default).
	if !isObject(body) {
		return false
	}
	return json.Unmarshal(body, v) == nil
}

// isObject tells whether a JSON text starts as an object.
func isObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// comfyPrompt is a ComfyUI /prompt body. Only the graph is read: the rest (client_id,
// extra_data, which may carry the whole UI workflow) is skipped without being kept.
type comfyPrompt struct {
	Prompt json.RawMessage `json:"prompt"`
}

// NodeGraph is the signature of a ComfyUI /prompt body: the sorted, unique model names of
// its nodes, then the sorted sizes of its empty latents.
func NodeGraph(body []byte) string {
	var p comfyPrompt
	if !decode(body, &p) || !isObject(p.Prompt) {
		return ""
	}
	// The graph is small: it is read whole, numbers kept as written.
	var graph map[string]any
	dec := json.NewDecoder(bytes.NewReader(p.Prompt))
	dec.UseNumber()
	if dec.Decode(&graph) != nil {
		return ""
	}
	var models, latents []string
	for _, n := range graph {
		node, ok := n.(map[string]any)
		if !ok {
			continue
		}
		inputs, _ := node["inputs"].(map[string]any)
		for key, v := range inputs {
			if !modelKey(key) {
				continue
			}
			// A string is a file name; an array is a link to another node's output.
			if name, ok := v.(string); ok && name != "" {
				models = append(models, name)
			}
		}
		if class, _ := node["class_type"].(string); emptyLatent(class) {
			if size := latentSize(inputs); size != "" {
				latents = append(latents, size)
			}
		}
	}
	if len(models) == 0 && len(latents) == 0 {
		return ""
	}
	slices.Sort(models)
	models = slices.Compact(models)
	slices.Sort(latents)

	var b strings.Builder
	b.WriteString(strings.Join(models, "+"))
	for _, l := range latents {
		b.WriteByte('@')
		b.WriteString(l)
	}
	return b.String()
}

// modelKey tells whether an input named key holds a model's file name: the loaders'
// inputs end in "_name", possibly numbered (ckpt_name, unet_name, vae_name, clip_name1,
// clip_name2, lora_name, control_net_name, upscale_model_name...). A sampler's name is
// not a model.
func modelKey(key string) bool {
	key = strings.TrimRight(key, "0123456789")
	return strings.HasSuffix(key, "_name") && key != "sampler_name" && key != "scheduler_name"
}

// emptyLatent tells whether a node class makes the empty latent a job samples into
// (EmptyLatentImage, EmptySD3LatentImage, EmptyHunyuanLatentVideo...).
func emptyLatent(class string) bool {
	return strings.HasPrefix(class, "Empty") && strings.Contains(class, "Latent")
}

// latentSize is "WxHxB" (and "xL" when the latent has a length, as a video's does) for
// an empty latent's inputs. A value that is not a number (a link to another node) is "?";
// a latent none of whose sizes is a number gives "".
func latentSize(inputs map[string]any) string {
	keys := []string{"width", "height", "batch_size"}
	if _, ok := inputs["length"]; ok {
		keys = append(keys, "length")
	}
	parts := make([]string, len(keys))
	known := false
	for i, k := range keys {
		if s, ok := number(inputs[k]); ok {
			parts[i] = s
			known = true
		} else {
			parts[i] = "?"
		}
	}
	if !known {
		return ""
	}
	return strings.Join(parts, "x")
}

// number is v written canonically when it is a JSON number: 1024.0 and 1024 are both "1024".
func number(v any) (string, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return "", false
	}
	if i, err := n.Int64(); err == nil {
		return strconv.FormatInt(i, 10), true
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", false
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10), true
	}
	return strconv.FormatFloat(f, 'f', -1, 64), true
}

// a1111Job is an Automatic1111/Forge txt2img or img2img body. Only the fields that decide
// the memory are kept: init_images (base64 images, possibly megabytes) are skipped.
type a1111Job struct {
	OverrideSettings struct {
		Checkpoint json.RawMessage `json:"sd_model_checkpoint"`
	} `json:"override_settings"`
	Width     json.RawMessage `json:"width"`
	Height    json.RawMessage `json:"height"`
	BatchSize json.RawMessage `json:"batch_size"`
	EnableHR  json.RawMessage `json:"enable_hr"`
	HRScale   json.RawMessage `json:"hr_scale"`
	HRResizeX json.RawMessage `json:"hr_resize_x"`
	HRResizeY json.RawMessage `json:"hr_resize_y"`
}

// Generation is the signature of an A1111 txt2img or img2img body: CHECKPOINT@WxHxB, then
// +hrSCALE (or +hrXxY when the body asks for a hires size rather than a scale) when hires
// is on.
func Generation(body []byte) string {
	var j a1111Job
	if !decode(body, &j) {
		return ""
	}
	checkpoint := rawString(j.OverrideSettings.Checkpoint)
	if checkpoint == "" {
		checkpoint = "current"
	}
	var b strings.Builder
	b.WriteString(checkpoint)
	b.WriteByte('@')
	b.WriteString(orDefault(j.Width, "512"))
	b.WriteByte('x')
	b.WriteString(orDefault(j.Height, "512"))
	b.WriteByte('x')
	b.WriteString(orDefault(j.BatchSize, "1"))
	if string(j.EnableHR) == "true" {
		b.WriteString("+hr")
		rx, ry := orDefault(j.HRResizeX, "0"), orDefault(j.HRResizeY, "0")
		if positive(rx) || positive(ry) {
			// A1111 upscales to this size, and ignores hr_scale.
			b.WriteString(rx)
			b.WriteByte('x')
			b.WriteString(ry)
		} else {
			b.WriteString(orDefault(j.HRScale, "2"))
		}
	}
	return b.String()
}

// positive tells whether a canonical number is above zero.
func positive(s string) bool {
	return s != "0" && !strings.HasPrefix(s, "-")
}

// orDefault is raw written canonically when it is a number, def otherwise (absent or
// null: the engine's default).
func orDefault(raw json.RawMessage, def string) string {
	// raw was checked as JSON: when it starts as a number, it is one number.
	if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		if s, ok := number(json.Number(raw)); ok {
			return s
		}
	}
	return def
}

// rawString is raw's value when it is a JSON string, "" otherwise.
func rawString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// a1111Extras is an /sdapi/v1/extra-single-image or extra-batch-images body.
type a1111Extras struct {
	Upscaler1 json.RawMessage `json:"upscaler_1"`
}

// Upscale is the signature of an A1111 upscale (extras) job: "extras:" and the first
// upscaler's name, "None" (A1111's default: no upscaler) when the body names none.
func Upscale(body []byte) string {
	var e a1111Extras
	if !decode(body, &e) {
		return ""
	}
	name := rawString(e.Upscaler1)
	if name == "" {
		name = "None"
	}
	return "extras:" + name
}
