package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// duration refuses what does not parse, as caddy.Duration does, with an
// error that names no field.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

type inner struct {
	Every duration `json:"every,omitempty"`
}

type item struct {
	Kind string `json:"kind"`
}

type settings struct {
	Timeout duration `json:"timeout,omitempty"`
	Name    string   `json:"name,omitempty"`
	Items   []item   `json:"items,omitempty"`
	Skipped string   `json:"-"`
	//lint:ignore U1000 an unexported field, which the decoder must not fill
	hidden string
	inner
}

func TestDecodeFieldsNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		json, want string
	}{
		{`{"timeout": "soon"}`, `timeout: time: invalid duration "soon"`},
		{`{"every": "soon"}`, `every: time: invalid duration "soon"`},
		{`{"name": 3}`, `name: json: cannot unmarshal number`},
		{`{"items": [{"kind": "a", "bogus": 1}]}`, `items: json: unknown field "bogus"`},
		{`{"bogus": 1}`, `unknown field "bogus"`},
		{`{"Skipped": "x"}`, `unknown field "Skipped"`},
		{`{"hidden": "x"}`, `unknown field "hidden"`},
		{`[1]`, `cannot unmarshal array`},
	} {
		var s settings
		err := DecodeFields([]byte(tc.json), &s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.json, err, tc.want)
		}
	}
}

func TestDecodeFieldsDecodes(t *testing.T) {
	var s settings
	err := DecodeFields([]byte(`{"timeout":"2s","every":"1m","name":"x","items":[{"kind":"k"}]}`), &s)
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeout != duration(2*time.Second) || s.Every != duration(time.Minute) || s.Name != "x" || len(s.Items) != 1 || s.Items[0].Kind != "k" {
		t.Fatalf("decoded %+v", s)
	}
	if err := DecodeFields([]byte(`null`), &s); err != nil {
		t.Fatal(err)
	}
	var notStruct int
	if err := DecodeFields([]byte(`{}`), &notStruct); err == nil {
		t.Fatal("a pointer to an int was taken")
	}
	var syn *json.SyntaxError
	if err := DecodeFields([]byte(`{`), &s); !errors.As(err, &syn) {
		t.Fatalf("truncated JSON: %v", err)
	}
}
