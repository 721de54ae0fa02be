package bpf_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xdpshield/xdpshield/bpf"
)

// layout lists the fields of t, nested ones as a.b, with offset, size and
// kind: what a program reading the type by offset depends on.
func layout(t reflect.Type, prefix string, base uintptr) []string {
	if t.Kind() != reflect.Struct {
		return []string{fmt.Sprintf("%s @%d size %d %s", prefix, base, t.Size(), t.Kind())}
	}
	out := []string{fmt.Sprintf("%s @%d size %d struct", prefix, base, t.Size())}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "_" {
			continue
		}
		out = append(out, layout(f.Type, prefix+"."+f.Name, base+f.Offset)...)
	}
	return out
}

// TestWalkLayout: walk.c repeats shield.c's key and value of the sources
// table; they must agree field by field, or walk_iter and walk_visit read
// the wrong bytes of the real table.
func TestWalkLayout(t *testing.T) {
	for _, c := range []struct {
		name         string
		shield, walk any
	}{
		{"src_key", bpf.ShieldSrcKey{}, bpf.WalkSrcKey{}},
		{"source", bpf.ShieldSource{}, bpf.WalkSource{}},
		{"source_set", bpf.ShieldSourceSet{}, bpf.WalkSourceSet{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := layout(reflect.TypeOf(c.shield), c.name, 0)
			got := layout(reflect.TypeOf(c.walk), c.name, 0)
			assert.Equal(t, want, got, "walk.c's %s (-shield.c +walk.c)", c.name)
		})
	}
}
