package eta

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestFigureMedianOfTheLastMeasures(t *testing.T) {
	var f Figure
	if _, ok := f.Median(); ok {
		t.Fatal("a median of nothing")
	}
	for _, s := range []float64{5, 1, 3} {
		f.Add(sec(s))
	}
	if m, _ := f.Median(); m != sec(3) {
		t.Fatalf("median %v, want 3s", m)
	}
	f.Add(sec(4))
	if m, _ := f.Median(); m != sec(3.5) {
		t.Fatalf("median of four %v, want 3.5s", m)
	}
	for range figureSize {
		f.Add(sec(100))
	}
	if m, _ := f.Median(); f.Len() != figureSize || m != sec(100) {
		t.Fatalf("after %d more: %d measures, median %v", figureSize, f.Len(), m)
	}
}

func TestLearnedRoundTrip(t *testing.T) {
	l := figures()
	l.AddLoad("ollama", "llama3.2", sec(1.5))
	got, err := Decode(l.Encode())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"job w", eq(got.JobTime("w"))(sec(10))},
		{"job v", eq(got.JobTime("v"))(sec(20))},
		{"any job", eq(got.JobTime("other"))(sec(20))},
		{"unload", eq(got.StepTime("ollama", Unload))(sec(2))},
		{"free", eq(got.StepTime("comfy", Free))(sec(1))},
		{"wake", eq(got.StepTime("vllm", Wake))(sec(3))},
		{"prepare", eq(got.StepTime("a1111", Prepare))(sec(4))},
		{"load", eq(got.LoadTime("ollama", "llama3.2"))(sec(1.5))},
	} {
		if !c.ok {
			t.Errorf("%s not kept: %s", c.what, l.Encode())
		}
	}
	var v map[string]any
	if err := json.Unmarshal(got.Encode(), &v); err != nil || v["jobs"].(map[string]any)["w"].(map[string]any)["median_seconds"] != 10.0 {
		t.Fatalf("JSON %s", got.Encode())
	}
}

func eq(d interface{}, ok bool) func(interface{}) bool {
	return func(want interface{}) bool { return ok && d == want }
}

func TestLearnedEmptyShowsEmptyMaps(t *testing.T) {
	b, _ := json.Marshal(&Learned{})
	if string(b) != `{"jobs":{},"engines":{}}` {
		t.Fatalf("%s", b)
	}
}

func TestLearnedKeepsTheWorkflowsMeasuredLast(t *testing.T) {
	l := &Learned{}
	for i := range maxKeys + 5 {
		l.AddJob(fmt.Sprintf("w%d", i), sec(1))
	}
	l.AddJob("w0", sec(2)) // dropped already, measured again: newest
	if len(l.Jobs) != maxKeys {
		t.Fatalf("%d workflows kept, want %d", len(l.Jobs), maxKeys)
	}
	if _, ok := l.Jobs["w1"]; ok {
		t.Fatal("the oldest workflow kept")
	}
	if _, ok := l.Jobs["w0"]; !ok {
		t.Fatal("the newest workflow dropped")
	}
}

func TestDecodeRejectsGarbageAndDropsBadMeasures(t *testing.T) {
	if _, err := Decode([]byte("{")); err == nil {
		t.Fatal("garbage read")
	}
	l, err := Decode([]byte(`{"jobs":{"w":{"last_seconds":[-1,2,4]},"x":null},"engines":{"e":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := l.JobTime("w"); m != sec(3) || len(l.Jobs) != 1 || len(l.Engines) != 0 || !strings.Contains(string(l.Encode()), `"median_seconds":3`) {
		t.Fatalf("decoded %s", l.Encode())
	}
}
