package httpapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// What each field of the full status is to a stranger. A field added to
// the status fails TestStatusFieldsClassified until it is listed here;
// one listed public or redacted must be in PublicStatus, one listed
// private must not.
const (
	public   = "public"
	redacted = "redacted" // in the public view, in a form that says less
	private  = "private"
)

var statusFields = map[string]string{
	"state": public, "llm_inflight": public, "image_pending": public, "turnstile": public,
	"llm_waiting": public, "image_waiting": public, "hold_waiting": public, "oldest_wait_seconds": public,
	"warming": public, "freeing": public, "free_owed": public, "since": public, "last_switch": public,

	// The job's prompt_id is the key to its outputs on ComfyUI.
	"job.prompt_id": private, "job.engine": public, "job.source": public, "job.phase": public,
	"job.started": private, "job.interrupt_overdue": public, "job.interrupt_overdue_since": private,
	"job.age_seconds": public,

	// A path may carry a token; a hold waiter's owner names a person.
	"waiters[].kind": public, "waiters[].since": public, "waiters[].path": private, "waiters[].model": public,
	"waiters[].owner": private, "waiters[].waiting_for": public, "waiters[].position": public,
	"waiters[].expected_start": public, "waiters[].client": public,

	"holds[].id": private, "holds[].turnstile": private, "holds[].owner": private, "holds[].source": public,
	"holds[].since": private, "holds[].expires_at": public,

	// The condition's kind only: its arguments name the games watched.
	"presence[].condition": redacted, "presence[].engaged": public, "presence[].owner": private,
	"presence[].error": private,

	"engines[].name": public, "engines[].kind": public, "engines[].class": public, "engines[].url": private,
	"engines[].reachable": public, "engines[].state": public, "engines[].models": public, "engines[].last_workflow": public,
	"engines[].processes": private, "engines[].processes_unseen": private,
	"engines[].processes_left[].pid": private, "engines[].processes_left[].name": private,
	"engines[].waiting": private,

	"upstreams{}.url": private, "upstreams{}.reachable": public, "upstreams{}.websocket": public,
	"upstreams{}.gpu_reading": public,

	"vram.total_bytes": public, "vram.free_bytes": public, "vram.reserve_bytes": public, "vram.read_at": public,
	"vram.stale": public, "vram.error": private,
	// The image engines' footprints (workflow signatures) are left out.
	"vram.footprints[].engine": redacted, "vram.footprints[].model": redacted, "vram.footprints[].bytes": redacted,
	"vram.footprints[].source": redacted, "vram.footprints[].alone": redacted,
	"vram.loaded[].engine": public, "vram.loaded[].model": public, "vram.loaded[].bytes": public,
	"vram.loaded[].inflight": public, "vram.pending_bytes": public,
	"vram.job.engine": public, "vram.job.workflow": private, "vram.job.peak_bytes": public,
	"vram.job.beside_bytes": public,

	// Workflow signatures name the models and sizes people render.
	"learned": private,

	"wait_buffer.bytes": public, "wait_buffer.limit": public, "wait_buffer.peak": public,
	"waiting_limit": public, "warnings": redacted,
}

// jsonPaths adds to out the JSON paths of t's leaves: "a.b" for a member
// of an object, "a[]" for an array's elements, "a{}" for a map's values.
// A path that stop reports is a leaf.
func jsonPaths(t reflect.Type, prefix string, stop func(string) bool, out map[string]bool) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			jsonPaths(f.Type, prefix, stop, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		jsonValuePaths(f.Type, name, stop, out)
	}
}

func jsonValuePaths(t reflect.Type, path string, stop func(string) bool, out map[string]bool) {
	if stop(path) {
		out[path] = true
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	elem, suffix := t, ""
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		elem, suffix = t.Elem(), "[]"
	case reflect.Map:
		elem, suffix = t.Elem(), "{}"
	}
	for elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	if elem.Kind() != reflect.Struct || elem == reflect.TypeFor[time.Time]() {
		out[path] = true
		return
	}
	jsonPaths(elem, path+suffix, stop, out)
}

func pathsOf[T any](stop func(string) bool) []string {
	out := map[string]bool{}
	jsonPaths(reflect.TypeFor[T](), "", stop, out)
	return slices.Sorted(func(yield func(string) bool) {
		for p := range out {
			if !yield(p) {
				return
			}
		}
	})
}

// TestStatusFieldsClassified checks that every field of the full status
// is classified, that the public view has exactly the fields classified
// public or redacted, and that no field is listed that the status lacks.
func TestStatusFieldsClassified(t *testing.T) {
	full := pathsOf[Status](func(p string) bool { _, ok := statusFields[p]; return ok })
	for _, p := range full {
		if _, ok := statusFields[p]; !ok {
			t.Errorf("the status's %q is not classified: add it to statusFields (public, redacted or private) "+
				"and, unless private, to PublicStatus and Public", p)
		}
	}
	for p := range statusFields {
		if !slices.Contains(full, p) {
			t.Errorf("statusFields lists %q, which the status does not have", p)
		}
	}
	var want []string
	for p, c := range statusFields {
		if c != private {
			want = append(want, p)
		}
	}
	// The public view also names a hold's expiry as the contract does.
	want = append(want, "holds[].expires")
	slices.Sort(want)
	if got := pathsOf[PublicStatus](func(string) bool { return false }); !slices.Equal(got, want) {
		t.Errorf("the public view's fields:\n got %q\nwant %q", got, want)
	}
}

// secretStatus is a full status in which each private field holds a
// value that says "secret", and each public one a value that must show.
func secretStatus() Status {
	now := time.Now()
	yes := true
	learned := &eta.Learned{}
	learned.AddJob("comfyui:secret-lora.safetensors@1024x1024x1", time.Minute)
	st := Status{Status: gpu.Status{
		State: "hold", Turnstile: "default", Since: now, HoldWaiting: 1, ImageWaiting: 1,
		Job: &gpu.JobStatus{Job: gpu.Job{PromptID: "secret-prompt", Engine: "comfyui", Source: "proxy", Phase: "running", Started: now}, AgeSeconds: 3},
		Waiters: []gpu.WaiterStatus{
			{Kind: "hold", Since: now, Path: "/secret-token/gpu_turnstile/holds", Owner: "secret-owner", Position: 1, ExpectedStart: &now},
			{Kind: "image", Since: now, Path: "/prompt", Client: "c1a2b3", WaitingFor: "hold", Position: 2},
		},
		Holds: []gpu.HoldStatus{
			{ID: "secret-id", Turnstile: "default", Owner: "secret-backup", Source: "admin", Since: now, ExpiresAt: now.Add(time.Minute)},
			{ID: "secret-id2", Turnstile: "default", Owner: "process:secret-game.exe", Source: "presence", Since: now},
		},
		Presence: []gpu.PresenceStatus{
			{Condition: "process secret-game*.exe", Engaged: true, Owner: "process:secret-game.exe"},
			{Condition: "steam home /home/secret-user", Error: "secret: reading registry.vdf"},
		},
		Engines: []gpu.EngineStatus{
			{Name: "ollama", Kind: "ollama", Class: "llm", URL: "http://secret-host:11435", Reachable: &yes, State: "emptied",
				Models: []string{"llama3.2"}, Processes: 2, ProcessesLeft: []gpu.ProcessLeft{{PID: 4242, Name: "secret-runner"}}, Waiting: "secret-why"},
			{Name: "comfyui", Kind: "comfyui", Class: "image", URL: "http://secret-host:8189", State: "running"},
		},
		Upstreams: map[string]gpu.UpstreamStatus{"comfy": {URL: "http://secret-host:8189", Reachable: &yes, Websocket: &yes}},
		VRAM: &gpu.VRAMStatus{TotalBytes: 24 << 30, FreeBytes: 5 << 30, Error: "secret: nvidia-smi failed",
			Footprints: []gpu.FootprintStatus{
				{Engine: "ollama", Model: "llama3.2", Bytes: 5 << 30, Source: "learned"},
				{Model: "qwen3:8b", Bytes: 6 << 30, Source: "configured"},
				{Engine: "comfyui", Model: "comfyui:secret-lora.safetensors@1024x1024x1", Bytes: 9 << 30, Source: "learned"},
			},
			Loaded: []gpu.LoadedStatus{{Engine: "ollama", Model: "llama3.2", Bytes: 5 << 30}},
			Job:    &gpu.JobMemoryStatus{Engine: "comfyui", Workflow: "comfyui:secret-lora.safetensors@1024x1024x1", PeakBytes: 9 << 30}},
		Learned: learned,
	}, Warnings: []string{"guarded requests were proxied to secret-host:9999, which is none of this turnstile's engines"},
		PublicWarnings: []string{"guarded requests were proxied to an upstream, which is none of this turnstile's engines"}}
	return st
}

// TestPublicLeavesOutThePrivate projects secretStatus: nothing private
// shows, what is public does.
func TestPublicLeavesOutThePrivate(t *testing.T) {
	st := secretStatus()
	full, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(full), "secret") {
		t.Fatal("the sample's secrets do not show in the full status")
	}
	b, err := json.Marshal(Public(st))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, s := range []string{"secret", "4242", "11435", "8189", "learned\":{"} {
		if strings.Contains(got, s) {
			t.Errorf("the public view shows %q: %s", s, got)
		}
	}
	for _, s := range []string{
		`"state":"hold"`, `"phase":"running"`, `"age_seconds":3`, `"client":"c1a2b3"`, `"waiting_for":"hold"`, `"position":2`,
		`"holds":[{"source":"admin","expires":`, `{"source":"presence"}`,
		`"presence":[{"condition":"process","engaged":true},{"condition":"steam","engaged":false}]`,
		`{"name":"ollama","kind":"ollama","class":"llm","state":"emptied","reachable":true,"models":["llama3.2"]}`,
		`"upstreams":{"comfy":{"reachable":true,"websocket":true}}`,
		`"footprints":[{"engine":"ollama","model":"llama3.2","bytes":5368709120,"source":"learned"},{"engine":"","model":"qwen3:8b"`,
		`"job":{"engine":"comfyui","peak_bytes":9663676416,"beside_bytes":0}`,
		`"warnings":["guarded requests were proxied to an upstream,`,
	} {
		if !strings.Contains(got, s) {
			t.Errorf("the public view lacks %s: %s", s, got)
		}
	}
	if empty, _ := json.Marshal(Public(Status{})); !strings.Contains(string(empty), `"waiters":[],"holds":[],`) ||
		!strings.Contains(string(empty), `"engines":[],"upstreams":{}`) || strings.Contains(string(empty), "presence") {
		t.Errorf("an empty status's public view: %s", empty)
	}
}
