package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/testdir"
)

// memoryBlock is a global block with an engine and vram_probe nvidia-smi
// on lines 2 and 3; lines follow from line 4.
func memoryBlock(lines ...string) string {
	return "gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tvram_probe nvidia-smi 1\n\t" + strings.Join(lines, "\n\t") + "\n}"
}

// Each memory option is parsed from the Caddyfile into its field, and
// vram_admission makes the admission's config, defaults filled in.
func TestMemoryOptionsParse(t *testing.T) {
	_, s, err := parse(t, memoryBlock("vram_admission", "vram_reserve 2GiB", "vram_poll_interval 250ms", "vram_stale admit",
		"model_vram llama3.1:8b 6GiB", "model_vram qwen 512MiB", "co_resident llama3.1:8b qwen", "co_resident phi"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.VRAMAdmission || s.VRAMReserve != 2<<30 || time.Duration(s.VRAMPollInterval) != 250*time.Millisecond || s.VRAMStale != "admit" ||
		!reflect.DeepEqual(s.ModelVRAM, map[string]int64{"llama3.1:8b": 6 << 30, "qwen": 512 << 20}) ||
		!slices.Equal(s.CoResident, []string{"llama3.1:8b", "qwen", "phi"}) {
		t.Fatalf("parsed %+v", s)
	}
	c, err := Validate(*s)
	if err != nil {
		t.Fatal(err)
	}
	m := c.GPU.Memory
	if m == nil || m.Index != 1 || m.Reserve != 2<<30 || m.Poll != 250*time.Millisecond || m.SMIPath != "" || !m.StaleAdmits ||
		!reflect.DeepEqual(m.Models, s.ModelVRAM) || !slices.Equal(m.CoResident, s.CoResident) {
		t.Fatalf("memory config %+v", m)
	}
	s.ModelVRAM["qwen"] = 1
	if m.Models["qwen"] != 512<<20 {
		t.Error("the memory config shares the settings' map")
	}
	if len(c.Warnings()) != 0 {
		t.Errorf("warnings %q", c.Warnings())
	}
	found := false
	for _, f := range c.LogFields() {
		found = found || f.Key == "vram_admission"
	}
	if !found {
		t.Error("the start-up log does not say vram_admission is on")
	}

	// The defaults: a 1s poll, no reserve, GPU 0.
	_, s, err = parse(t, "gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tvram_probe nvidia-smi\n\tvram_admission\n}")
	if err != nil {
		t.Fatal(err)
	}
	c, err = Validate(*s)
	if err != nil {
		t.Fatal(err)
	}
	if m := c.GPU.Memory; m == nil || m.Index != 0 || m.Reserve != 0 || m.Poll != time.Second || m.Models != nil || m.CoResident != nil {
		t.Fatalf("defaults %+v", m)
	}

	// Off unless vram_admission is given.
	c, err = Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}})
	if err != nil || c.GPU.Memory != nil {
		t.Fatalf("%+v, %v: admission on without vram_admission", c.GPU.Memory, err)
	}

	// vram_reserve 0 is taken.
	if _, s, err = parse(t, memoryBlock("vram_admission", "vram_reserve 0")); err != nil || s.VRAMReserve != 0 {
		t.Fatalf("vram_reserve 0: %+v, %v", s, err)
	}
}

// Without vram_admission, vram_reserve, vram_poll_interval and model_vram
// are taken and do nothing, which Warnings says.
func TestMemoryOptionsInert(t *testing.T) {
	_, s, err := parse(t, memoryBlock("vram_reserve 1GiB", "vram_poll_interval 2s", "model_vram m 1GiB"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Validate(*s)
	if err != nil {
		t.Fatal(err)
	}
	if c.GPU.Memory != nil {
		t.Fatalf("admission on: %+v", c.GPU.Memory)
	}
	if w := c.Warnings(); len(w) != 1 || w[0] != "model_vram, vram_reserve, vram_poll_interval given without vram_admission: no effect" {
		t.Fatalf("warnings %q", w)
	}
}

// vram_stale defaults to wait, and a JSON config with another value is
// refused naming the field.
func TestVRAMStale(t *testing.T) {
	_, s, err := parse(t, memoryBlock("vram_admission"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Validate(*s)
	if err != nil {
		t.Fatal(err)
	}
	if c.GPU.Memory.StaleAdmits {
		t.Error("vram_stale defaults to admit, want wait")
	}
	s.VRAMStale = "sometimes"
	if _, err := Validate(*s); err == nil || !strings.Contains(err.Error(), `vram_stale: "sometimes": want wait or admit`) {
		t.Errorf("vram_stale sometimes: %v", err)
	}
}

// Every invalid memory option is refused at its line, naming it.
func TestMemoryOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		src, want string
		line      int
	}{
		{memoryBlock("vram_admission on"), "wrong argument count", 4},
		{memoryBlock("vram_admission", "vram_admission"), "vram_admission: given twice, on lines 4 and 5", 5},
		{memoryBlock("vram_reserve 1GiB", "vram_reserve 2GiB"), "vram_reserve: given twice, on lines 4 and 5", 5},
		{memoryBlock("vram_poll_interval 1s", "vram_poll_interval 2s"), "vram_poll_interval: given twice, on lines 4 and 5", 5},
		{memoryBlock("vram_reserve"), "vram_reserve: missing value", 4},
		{memoryBlock("vram_reserve lots"), `vram_reserve: "lots" is not a size >= 0 (e.g. 2GiB)`, 4},
		{memoryBlock("vram_reserve -1GiB"), `vram_reserve: "-1GiB" is not a size >= 0`, 4},
		{memoryBlock("vram_poll_interval 0s"), "vram_poll_interval: 0s must be positive", 4},
		{memoryBlock("vram_poll_interval soon"), `vram_poll_interval: invalid duration "soon"`, 4},
		{memoryBlock("vram_stale"), "wrong argument count", 4},
		{memoryBlock("vram_stale later"), `vram_stale: "later": want wait or admit`, 4},
		{memoryBlock("vram_stale wait admit"), "wrong argument count", 4},
		{memoryBlock("vram_stale wait", "vram_stale admit"), "vram_stale: given twice, on lines 4 and 5", 5},
		{memoryBlock("model_vram m"), "model_vram: want `model_vram MODEL SIZE`", 4},
		{memoryBlock("model_vram m 1GiB 2GiB"), "model_vram: want `model_vram MODEL SIZE`", 4},
		{memoryBlock("model_vram m 0"), `model_vram: m: "0" is not a size > 0 (e.g. 6GiB)`, 4},
		{memoryBlock("model_vram m big"), `model_vram: m: "big" is not a size > 0`, 4},
		{memoryBlock(`model_vram "" 1GiB`), "model_vram: empty model name", 4},
		{memoryBlock("vram_admission", "model_vram m 1GiB", "model_vram n 1GiB", "model_vram m 2GiB"), `model_vram: model "m" given twice, on lines 5 and 7`, 7},
		{memoryBlock("vram_admission", "co_resident"), "co_resident: name at least one model", 5},
		{memoryBlock("vram_admission", `co_resident a ""`), "co_resident: empty model name", 5},
		{memoryBlock("vram_admission", "co_resident a a"), `co_resident: model "a" listed twice, on lines 5 and 5`, 5},
		{memoryBlock("vram_admission", "co_resident a b", "co_resident c b"), `co_resident: model "b" listed twice, on lines 5 and 6`, 6},
		// Across options: at the option at fault.
		{memoryBlock("vram_reserve 1GiB", "co_resident a", "co_resident b"), "co_resident: needs vram_admission", 5},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tvram_admission\n}", "vram_admission: needs vram_probe nvidia-smi", 3},
		{"gpu_turnstile {\n\tcomfy http://127.0.0.1:1\n\tvram_probe comfy\n\tvram_admission\n}", "vram_admission: needs vram_probe nvidia-smi", 4},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tvram_reserve 1GiB\n}", "vram_reserve: needs vram_probe nvidia-smi", 3},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tvram_poll_interval 2s\n}", "vram_poll_interval: needs vram_probe nvidia-smi", 3},
		{"gpu_turnstile {\n\tollama http://127.0.0.1:1\n\tmodel_vram m 1GiB\n\tmodel_vram n 1GiB\n}", "model_vram: needs vram_probe nvidia-smi", 3},
	} {
		_, _, err := parse(t, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), ":"+strconv.Itoa(tc.line)) {
			t.Errorf("%q: %v, want %q at line %d", tc.src, err, tc.want, tc.line)
		}
	}
}

// The models of one block are not those of the next: the same model in
// two turnstiles is no duplicate.
func TestModelVRAMPerBlock(t *testing.T) {
	d := caddyfile.NewTestDispenser("gpu_turnstile a {\n\tollama http://127.0.0.1:1\n\tvram_probe nvidia-smi\n\tmodel_vram m 1GiB\n}\n" +
		"gpu_turnstile b {\n\tollama http://127.0.0.1:2\n\tvram_probe nvidia-smi\n\tmodel_vram m 1GiB\n}")
	for _, want := range []string{"a", "b"} {
		name, _, err := ParseGlobalOption(d, func(string) bool { return false })
		if err != nil || name != want {
			t.Fatalf("%q, %v; want %q", name, err, want)
		}
	}
}

// The JSON fields decode into the same settings, and a JSON config gets
// the Caddyfile's checks, naming the field.
func TestMemoryOptionsJSON(t *testing.T) {
	var s Settings
	err := json.Unmarshal([]byte(`{"ollama": "http://127.0.0.1:1", "vram_probe": "nvidia-smi", "gpu_index": 1,
		"vram_admission": true, "vram_reserve": 2147483648, "vram_poll_interval": "250ms",
		"model_vram": {"llama3.1:8b": 6442450944}, "co_resident": ["llama3.1:8b", "phi"]}`), &s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Validate(s)
	if err != nil {
		t.Fatal(err)
	}
	m := c.GPU.Memory
	if m == nil || m.Index != 1 || m.Reserve != 2<<30 || m.Poll != 250*time.Millisecond ||
		!reflect.DeepEqual(m.Models, map[string]int64{"llama3.1:8b": 6 << 30}) || !slices.Equal(m.CoResident, []string{"llama3.1:8b", "phi"}) {
		t.Fatalf("memory config %+v", m)
	}

	for _, tc := range []struct{ json, want string }{
		{`{"vram_poll_interval": "soon"}`, `vram_poll_interval: time: invalid duration "soon"`},
		{`{"vram_reserve": "2GiB"}`, `vram_reserve: json: cannot unmarshal string`},
		{`{"model_vram": {"m": "6GiB"}}`, `model_vram: json: cannot unmarshal string`},
		{`{"model_vram": ["m"]}`, `model_vram: json: cannot unmarshal array`},
		{`{"co_resident": "m"}`, `co_resident: json: cannot unmarshal string`},
		{`{"vram_admission": "yes"}`, `vram_admission: json: cannot unmarshal string`},
	} {
		var s Settings
		if err := json.Unmarshal([]byte(tc.json), &s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.json, err, tc.want)
		}
	}

	smi := Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMProbe: "nvidia-smi"}
	with := func(f func(*Settings)) Settings { s := smi; f(&s); return s }
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{with(func(s *Settings) { s.VRAMReserve = -1 }), "vram_reserve: -1 is negative"},
		{with(func(s *Settings) { s.VRAMReserve = MaxVRAMSize + 1 }), "vram_reserve: 4611686018427387905 is over the 4EiB maximum"},
		{with(func(s *Settings) { s.VRAMPollInterval = -1 }), "vram_poll_interval: -1ns is negative"},
		{with(func(s *Settings) { s.ModelVRAM = map[string]int64{"m": 0} }), "model_vram: m: 0 is not a size > 0"},
		{with(func(s *Settings) { s.ModelVRAM = map[string]int64{"m": -5} }), "model_vram: m: -5 is not a size > 0"},
		{with(func(s *Settings) { s.ModelVRAM = map[string]int64{"m": MaxVRAMSize + 1} }), "model_vram: m: 4611686018427387905 is over the 4EiB maximum"},
		{with(func(s *Settings) { s.ModelVRAM = map[string]int64{"": 1} }), "model_vram: empty model name"},
		{with(func(s *Settings) { s.VRAMAdmission, s.CoResident = true, []string{"a", ""} }), "co_resident: empty model name"},
		{with(func(s *Settings) { s.VRAMAdmission, s.CoResident = true, []string{"a", "b", "a"} }), `co_resident: model "a" listed twice`},
		{with(func(s *Settings) { s.CoResident = []string{"a"} }), "co_resident: needs vram_admission"},
		{Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMAdmission: true}, "vram_admission: needs vram_probe nvidia-smi"},
		{Settings{Shorthands: map[string]string{"comfy": "http://127.0.0.1:1"}, VRAMProbe: "comfy", VRAMAdmission: true, CoResident: []string{"a"}}, "vram_admission: needs vram_probe nvidia-smi"},
		{Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMReserve: 1}, "vram_reserve: needs vram_probe nvidia-smi"},
		{Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMPollInterval: 1}, "vram_poll_interval: needs vram_probe nvidia-smi"},
		{Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, ModelVRAM: map[string]int64{"m": 1}}, "model_vram: needs vram_probe nvidia-smi"},
	} {
		if _, err := Validate(tc.s); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.s, err, tc.want)
		}
	}
}

// fakeSMI puts an nvidia-smi in PATH, alone: a shell script running sh,
// or on Windows a batch file running bat (found through PATHEXT as
// nvidia-smi.exe would be, and printing CRLF lines as it does).
func fakeSMI(t *testing.T, sh, bat string) string {
	t.Helper()
	dir := testdir.New(t)
	path, script := filepath.Join(dir, "nvidia-smi"), "#!/bin/sh\n"+sh+"\n"
	if runtime.GOOS == "windows" {
		path, script = path+".bat", "@echo off\r\n"+bat+"\r\n"
	}
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return path
}

// Locate finds nvidia-smi for vram_admission and refuses a reserve at or
// over the card's total; a card that cannot be read refuses nothing.
func TestLocateMemory(t *testing.T) {
	admission := func(reserve int64) *Turnstile {
		t.Helper()
		c, err := Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMProbe: "nvidia-smi", VRAMAdmission: true, VRAMReserve: reserve})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	path := fakeSMI(t, `echo "GPU-1234, 24576, 20000"`, `echo GPU-1234, 24576, 20000`) // 24 GiB
	c := admission(2 << 30)
	if err := c.Locate(); err != nil || c.GPU.Memory.SMIPath != path {
		t.Fatalf("%v, path %q", err, c.GPU.Memory.SMIPath)
	}
	for _, reserve := range []int64{24 << 30, 30 << 30} {
		c := admission(reserve)
		err := c.Locate()
		want := "vram_reserve: " + map[int64]string{24 << 30: "24 GiB", 30 << 30: "30 GiB"}[reserve] + " is at or over the card's total memory (24 GiB)"
		if err == nil || err.Error() != want {
			t.Errorf("reserve %d: %v, want %q (warnings %q)", reserve, err, want, c.Warnings())
		}
	}

	fakeSMI(t, "echo 'NVIDIA-SMI has failed' >&2; exit 9", "echo NVIDIA-SMI has failed 1>&2\r\nexit /b 9")
	c = admission(30 << 30)
	if err := c.Locate(); err != nil {
		t.Errorf("a card that cannot be read refused the config: %v", err)
	}
	if w := c.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "vram_reserve not checked against the card's total: ") {
		t.Errorf("a card that cannot be read: warnings %q, want one that says the reserve was not checked", w)
	}

	t.Setenv("PATH", testdir.New(t))
	// Parsing and validating (caddy adapt) look nothing up on the host.
	if _, _, err := parse(t, memoryBlock("vram_admission", "vram_reserve 1000GiB")); err != nil {
		t.Fatalf("adapting needs nvidia-smi: %v", err)
	}
	err := admission(0).Locate()
	if err == nil || !strings.HasPrefix(err.Error(), "vram_admission: nvidia-smi not found in PATH: ") {
		t.Errorf("without nvidia-smi: %v", err)
	}
	// Without vram_admission nothing is looked for.
	c, err = Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, VRAMProbe: "nvidia-smi", VRAMReserve: 1 << 30})
	if err != nil || c.Locate() != nil {
		t.Errorf("inert options looked nvidia-smi up: %v", err)
	}
}
