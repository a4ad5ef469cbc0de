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

// promptBody is the body of POST /prompt.
type promptBody struct {
	Prompt   json.RawMessage `json:"prompt"`
	ClientID string          `json:"client_id"`
	Extra    map[string]any  `json:"extra_data"`
	PromptID string          `json:"prompt_id"`
	Front    bool            `json:"front"`
}

// promptNode is one node of a prompt's graph.
type promptNode struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
}

// promptError is a prompt that fails validation; it is answered with
// ComfyUI's 400 shape.
type promptError struct {
	typ, message, details string
	nodeErrors            map[string]any
}

// invalidPrompt is a promptError that names no node.
func invalidPrompt(typ, message, details string) *promptError {
	return &promptError{typ: typ, message: message, details: details, nodeErrors: map[string]any{}}
}

func (e *promptError) write(w http.ResponseWriter) {
	writeJSON(w, 400, map[string]any{
		"error":       map[string]any{"type": e.typ, "message": e.message, "details": e.details, "extra_info": map[string]any{}},
		"node_errors": e.nodeErrors,
	})
}

func (s *Server) postPrompt(w http.ResponseWriter, r *http.Request) {
	var body promptBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		serverTrouble(w)
		return
	}
	if len(body.Prompt) == 0 || string(body.Prompt) == "null" {
		invalidPrompt("no_prompt", "No prompt provided", "No prompt provided").write(w)
		return
	}
	var nodes map[string]promptNode
	if err := json.Unmarshal(body.Prompt, &nodes); err != nil {
		serverTrouble(w) // a prompt given as a string, or not an object of nodes
		return
	}
	ids := sortedIDs(nodes)
	outputs, failing, perr := graphOutputs(nodes, ids)
	if perr == nil {
		perr = validateInputs(nodes, ids, outputs)
	}
	if perr != nil {
		perr.write(w)
		return
	}
	j := s.newJob(body, ids, outputs, failing)
	n := s.enqueue(j)
	s.prompts.Add(1)
	writeJSON(w, 200, map[string]any{"prompt_id": j.id, "number": n, "node_errors": map[string]any{}})
}

// sortedIDs is the graph's node ids in the order the fake runs them.
func sortedIDs(nodes map[string]promptNode) []string {
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// graphOutputs checks that every node's class is known and that the graph
// has an output, and returns its output nodes and whether it has a
// failing one.
func graphOutputs(nodes map[string]promptNode, ids []string) (outputs []string, failing bool, err *promptError) {
	for _, id := range ids {
		n := nodes[id]
		if !knownNodes[n.ClassType] {
			return nil, false, invalidPrompt("invalid_prompt", "Cannot execute because node "+n.ClassType+" does not exist.", "Node ID '#"+id+"'")
		}
		switch n.ClassType {
		case "SaveImage", "PreviewImage":
			outputs = append(outputs, id)
		case "Fail":
			failing = true
		}
	}
	if len(outputs) == 0 {
		return nil, false, invalidPrompt("prompt_no_outputs", "Prompt has no outputs", "")
	}
	return outputs, failing, nil
}

// validateInputs checks the nodes' input values against their limits (the
// fake knows one: ImageBlur's blur_radius is at most 31).
func validateInputs(nodes map[string]promptNode, ids, outputs []string) *promptError {
	for _, id := range ids {
		n := nodes[id]
		if radius, ok := n.Inputs["blur_radius"].(float64); ok && n.ClassType == "ImageBlur" && radius > 31 {
			e := invalidPrompt("prompt_outputs_failed_validation", "Prompt outputs failed validation", "")
			e.nodeErrors[id] = map[string]any{"errors": []map[string]any{{"type": "value_bigger_than_max",
				"message": "Value bigger than max", "details": fmt.Sprintf("blur_radius, %v bigger than max of 31", radius),
				"extra_info": map[string]any{"input_name": "blur_radius"}}},
				"dependent_outputs": outputs, "class_type": n.ClassType}
			return e
		}
	}
	return nil
}

// newJob is the job for a validated prompt: it keeps the prompt id the
// client chose, if any, and runs for extra_data's fake_duration_ms, if
// given.
func (s *Server) newJob(body promptBody, ids, outputs []string, failing bool) *job {
	id := body.PromptID
	if id == "" {
		id = newID()
	}
	d := s.opts.JobDuration
	if ms, ok := body.Extra["fake_duration_ms"].(float64); ok {
		d = time.Duration(ms * float64(time.Millisecond))
	}
	return &job{id: id, prompt: body.Prompt, nodes: ids, outputs: outputs, extra: body.Extra, clientID: body.ClientID,
		duration: d, fail: failing, stop: make(chan struct{}), killed: make(chan struct{})}
}

// serverTrouble is aiohttp's answer to an exception in a handler.
func serverTrouble(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprint(w, "500 Internal Server Error\n\nServer got itself in trouble")
}
