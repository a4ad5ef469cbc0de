package comfytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// knownNodes are the node classes the fake can run; "Fail" raises an
// error while running. Any other class is unknown to it, as a custom node
// that is not installed is to ComfyUI.
var knownNodes = map[string]bool{
	"KSampler": true, "CheckpointLoaderSimple": true, "CLIPTextEncode": true, "EmptyLatentImage": true,
	"VAEDecode": true, "EmptyImage": true, "ImageBlur": true, "LoadImage": true, "Fail": true,
	"SaveImage": true, "PreviewImage": true,
}

func (s *Server) postPrompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt   json.RawMessage `json:"prompt"`
		ClientID string          `json:"client_id"`
		Extra    map[string]any  `json:"extra_data"`
		PromptID string          `json:"prompt_id"`
		Front    bool            `json:"front"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		serverTrouble(w)
		return
	}
	fail := func(typ, msg, details string, nodeErrors map[string]any) {
		writeJSON(w, 400, map[string]any{
			"error":       map[string]any{"type": typ, "message": msg, "details": details, "extra_info": map[string]any{}},
			"node_errors": nodeErrors,
		})
	}
	if len(body.Prompt) == 0 || string(body.Prompt) == "null" {
		fail("no_prompt", "No prompt provided", "No prompt provided", map[string]any{})
		return
	}
	var nodes map[string]struct {
		ClassType string         `json:"class_type"`
		Inputs    map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal(body.Prompt, &nodes); err != nil {
		serverTrouble(w) // a prompt given as a string, or not an object of nodes
		return
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var outputs []string
	failing := false
	for _, id := range ids {
		n := nodes[id]
		if !knownNodes[n.ClassType] {
			fail("invalid_prompt", "Cannot execute because node "+n.ClassType+" does not exist.", "Node ID '#"+id+"'", map[string]any{})
			return
		}
		switch n.ClassType {
		case "SaveImage", "PreviewImage":
			outputs = append(outputs, id)
		case "Fail":
			failing = true
		}
	}
	if len(outputs) == 0 {
		fail("prompt_no_outputs", "Prompt has no outputs", "", map[string]any{})
		return
	}
	for _, id := range ids {
		n := nodes[id]
		if radius, ok := n.Inputs["blur_radius"].(float64); ok && n.ClassType == "ImageBlur" && radius > 31 {
			fail("prompt_outputs_failed_validation", "Prompt outputs failed validation", "", map[string]any{
				id: map[string]any{"errors": []map[string]any{{"type": "value_bigger_than_max",
					"message": "Value bigger than max", "details": fmt.Sprintf("blur_radius, %v bigger than max of 31", radius),
					"extra_info": map[string]any{"input_name": "blur_radius"}}},
					"dependent_outputs": outputs, "class_type": n.ClassType},
			})
			return
		}
	}
	id := body.PromptID
	if id == "" {
		id = newID()
	}
	d := s.opts.JobDuration
	if ms, ok := body.Extra["fake_duration_ms"].(float64); ok {
		d = time.Duration(ms * float64(time.Millisecond))
	}
	j := &job{id: id, prompt: body.Prompt, nodes: ids, outputs: outputs, extra: body.Extra, clientID: body.ClientID,
		duration: d, fail: failing, stop: make(chan struct{}), killed: make(chan struct{})}
	n := s.enqueue(j)
	s.prompts.Add(1)
	writeJSON(w, 200, map[string]any{"prompt_id": id, "number": n, "node_errors": map[string]any{}})
}

// serverTrouble is aiohttp's answer to an exception in a handler.
func serverTrouble(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprint(w, "500 Internal Server Error\n\nServer got itself in trouble")
}
