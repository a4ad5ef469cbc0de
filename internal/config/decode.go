package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// DecodeFields decodes the JSON object data into the struct *v field by
// field, as encoding/json with DisallowUnknownFields would, except that
// every error names the field whose value it refused. encoding/json does
// not add the field to the errors of a value's own UnmarshalJSON (such as
// caddy.Duration's), so "unload_timeout": "soon" would be refused with
// nothing to say where. Fields are matched by their JSON names exactly;
// the fields of embedded structs count as the outer struct's.
//
// v must be a pointer to a struct whose type has no UnmarshalJSON method
// of its own (call it with a defined type without methods).
func DecodeFields(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config.DecodeFields: %T is not a pointer to a struct", v)
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	fields := map[string]reflect.Value{}
	collectFields(rv.Elem(), fields)
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := fields[k]
		if !ok {
			return fmt.Errorf("unknown field %q", k)
		}
		dec := json.NewDecoder(bytes.NewReader(raw[k]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(f.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// collectFields adds the settable fields of struct value sv to fields by
// JSON name, those of embedded structs included.
func collectFields(sv reflect.Value, fields map[string]reflect.Value) {
	t := sv.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
			collectFields(sv.Field(i), fields) // as encoding/json, exported or not
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fields[name] = sv.Field(i)
	}
}
