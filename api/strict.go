package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkKeys walks the JSON object in body, and every object nested in it,
// and refuses what encoding/json would quietly accept for a value of type
// t: a key given twice (the last would win), a key whose case differs from
// the field's (it would match case-insensitively) and a field left out (it
// would keep its zero value: omitting dry_run would turn dry-run off).
// Fields tagged omitempty are optional. A nested key is named by its path
// (route[1].backends).
func checkKeys(body []byte, t reflect.Type) error {
	return checkValue(body, t, "")
}

// checkValue checks raw, decoded into a value of type t at path.
func checkValue(raw []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return checkObject(raw, t, path)
	case reflect.Slice, reflect.Array:
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil // not an array (null): the decoder reports it
		}
		for i, e := range elems {
			if err := checkValue(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkObject(raw []byte, t reflect.Type, path string) error {
	fields := map[string]reflect.Type{}
	var names, required []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
		names = append(names, name)
		if !strings.Contains(","+opts+",", ",omitempty,") {
			required = append(required, name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // not an object: the decoder reports it
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if seen[key] {
			return badf("duplicate key %q", join(path, key))
		}
		seen[key] = true
		ft, ok := fields[key]
		if !ok {
			for _, f := range names {
				if strings.EqualFold(f, key) {
					return badf("key %q: did you mean %q? keys are case-sensitive", join(path, key), f)
				}
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if ok {
			if err := checkValue(v, ft, join(path, key)); err != nil {
				return err
			}
		}
	}
	var missing []string
	for _, f := range required {
		if !seen[f] {
			missing = append(missing, join(path, f))
		}
	}
	if len(missing) > 0 {
		return badf("missing %s: every field is required (%s)", plural("field", missing), strings.Join(required, ", "))
	}
	return nil
}

// join names key inside the value at path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func plural(word string, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(names) == 1 {
		return word + " " + q[0]
	}
	return word + "s " + strings.Join(q, ", ")
}
