package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// checkKeys walks the top-level JSON object in body and refuses what
// encoding/json would quietly accept for a struct of type t: a key given
// twice (the last would win), a key whose case differs from the field's (it
// would match case-insensitively) and a field left out (it would keep its
// zero value: omitting dry_run would turn dry-run off). Fields tagged
// omitempty are optional.
func checkKeys(body []byte, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var fields, required []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(","+opts+",", ",omitempty,") {
			required = append(required, name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
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
			return badf("duplicate key %q", key)
		}
		seen[key] = true
		if !slices.Contains(fields, key) {
			for _, f := range fields {
				if strings.EqualFold(f, key) {
					return badf("key %q: did you mean %q? keys are case-sensitive", key, f)
				}
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	var missing []string
	for _, f := range required {
		if !seen[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return badf("missing %s: every field is required (%s)", plural("field", missing), strings.Join(required, ", "))
	}
	return nil
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
