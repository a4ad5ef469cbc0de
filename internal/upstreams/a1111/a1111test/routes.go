package a1111test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
)

// pngB64 is a 1x1 PNG, the fake's image by default, base64 as the API
// sends it.
const pngB64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// deviceErrorText is the exception text of a generation whose model is not
// on the GPU: PyTorch's, as a device mismatch would raise it (UNVERIFIED
// against a real A1111, see prepareCheckpoint).
const deviceErrorText = "Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!"

// generationDefaults are fields of StableDiffusionTxt2ImgProcessingAPI
// that "parameters" echoes when the request leaves them out.
var generationDefaults = map[string]any{
	"prompt": "", "negative_prompt": "", "styles": nil, "seed": -1, "sampler_name": nil, "batch_size": 1,
	"n_iter": 1, "steps": 50, "cfg_scale": 7.0, "width": 512, "height": 512, "override_settings": nil,
	"send_images": true, "save_images": false,
}

// image is one generated image, base64: the 1x1 PNG, with zero bytes
// after its end up to ImageBytes (PNG readers stop at its IEND chunk).
func (s *Server) image() string {
	s.imageOnce.Do(func() {
		s.imageB64 = pngB64
		png, _ := base64.StdEncoding.DecodeString(pngB64)
		if pad := s.opts.ImageBytes*3/4 - len(png); pad > 0 {
			s.imageB64 = base64.StdEncoding.EncodeToString(append(png, make([]byte, pad)...))
		}
	})
	return s.imageB64
}

func (s *Server) txt2img(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, "txt2img")
}

// img2img is txt2img with init images; none is a 404 raised before the
// lock is taken.
func (s *Server) img2img(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, "img2img")
}

// generate runs text2imgapi or img2imgapi: synchronous, inside the queue
// lock, answering at the job's end with the images made so far, the
// request's parameters and the info as a JSON string.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, route string) {
	var req map[string]any
	if !decodeBody(w, r, &req) {
		return
	}
	if route == "img2img" && req["init_images"] == nil {
		httpError(w, http.StatusNotFound, "Init image not found")
		return
	}
	j := s.newJob(route, "scripts_"+route, true, s.opts.JobDuration)
	if o, ok := req["override_settings"].(map[string]any); ok {
		j.checkpoint, _ = o["sd_model_checkpoint"].(string)
	}
	switch s.run(j, s.enqueue(j)) {
	case aborted:
		return
	case deviceError:
		apiError(w, http.StatusInternalServerError, "RuntimeError", "", deviceErrorText)
		return
	}
	params := map[string]any{}
	for k, v := range generationDefaults {
		params[k] = v
	}
	for k, v := range req {
		params[k] = v
	}
	s.mu.Lock()
	info, _ := json.Marshal(map[string]any{
		"prompt": params["prompt"], "all_prompts": []any{params["prompt"]}, "negative_prompt": params["negative_prompt"],
		"seed": 1234, "all_seeds": []int{1234}, "width": params["width"], "height": params["height"],
		"steps": s.opts.Steps, "sd_model_name": modelName(s.ckpt.title), "sd_model_hash": modelHash(s.ckpt.title), "job_timestamp": s.state.jobTimestamp,
		"infotexts": []string{fmt.Sprint(params["prompt"])},
	})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"images": []string{s.image()}, "parameters": params, "info": string(info)})
}

// validImage is decode_base64_to_image's test: an empty or undecodable
// image is an HTTPException 500 "Invalid encoded image", raised before
// the lock.
func validImage(w http.ResponseWriter, v any) bool {
	str, _ := v.(string)
	if _, err := base64.StdEncoding.DecodeString(str); str == "" || err != nil {
		httpError(w, http.StatusInternalServerError, "Invalid encoded image")
		return false
	}
	return true
}

// extraSingle is extras_single_image_api: an upscale under the lock,
// shown in /progress as "extras".
func (s *Server) extraSingle(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if !decodeBody(w, r, &req) || !validImage(w, req["image"]) {
		return
	}
	j := s.newJob("extras", "extras", false, s.opts.JobDuration)
	if s.run(j, s.enqueue(j)) == aborted {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"html_info": "", "image": s.image()})
}

// extraBatch is extras_batch_images_api, with imageList [{data, name}].
func (s *Server) extraBatch(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if !decodeBody(w, r, &req) {
		return
	}
	list, _ := req["imageList"].([]any)
	images := []string{}
	for _, it := range list {
		item, _ := it.(map[string]any)
		if !validImage(w, item["data"]) {
			return
		}
		images = append(images, s.image())
	}
	j := s.newJob("extras", "extras", false, s.opts.JobDuration)
	if s.run(j, s.enqueue(j)) == aborted {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"html_info": "", "images": images})
}

// interrogate is interrogateapi. No image is a 404 before the lock; an
// unknown model a 404 inside it. CLIP shows in /progress as
// "interrogate" (its own state.begin, with job_count left at -1);
// deepdanbooru calls no state.begin, so it runs under the lock without
// showing in /progress at all.
func (s *Server) interrogate(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if !decodeBody(w, r, &req) {
		return
	}
	if req["image"] == nil {
		httpError(w, http.StatusNotFound, "Image not found")
		return
	}
	if !validImage(w, req["image"]) {
		return
	}
	model, _ := req["model"].(string)
	if model == "" {
		model = "clip"
	}
	if model != "clip" && model != "deepdanbooru" {
		turn := s.queue.join()
		if s.queue.await(turn, s.stop) {
			s.queue.unlock()
			httpError(w, http.StatusNotFound, "Model not found")
		}
		return
	}
	stateJob, caption := "interrogate", "a painting of a lighthouse at dusk"
	if model == "deepdanbooru" {
		stateJob, caption = "", "no_humans, scenery, lighthouse"
	}
	j := s.newJob("interrogate", stateJob, false, s.opts.JobDuration)
	if s.run(j, s.enqueue(j)) == aborted {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"caption": caption})
}

// refresh is refresh-checkpoints, refresh-vae and refresh-embeddings:
// under the lock, with no job and no GPU work. They return None: null.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	turn := s.queue.join()
	if turn != nil {
		s.gpu.Mark(service, r.URL.Path+" waits for the queue lock")
	}
	if !s.queue.await(turn, s.stop) {
		return
	}
	s.queue.unlock()
	writeJSON(w, http.StatusOK, nil)
}
