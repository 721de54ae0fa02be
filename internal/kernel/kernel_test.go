package kernel

import "testing"

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"6.12.117+deb13-cloud-amd64", 6, 12, true},
		{"5.10.0-32-cloud-amd64", 5, 10, true},
		{"7.2", 7, 2, true},
		{"6.18.0", 6, 18, true},
		{"6", 6, 0, false},
		{"unknown", 0, 0, false},
		{"", 0, 0, false},
	} {
		ma, mi, ok := Version(tc.rel)
		if ma != tc.major || mi != tc.minor || ok != tc.ok {
			t.Errorf("Version(%q) = %d, %d, %v; want %d, %d, %v", tc.rel, ma, mi, ok, tc.major, tc.minor, tc.ok)
		}
	}
	ma, mi, ok := Version(Release())
	if !ok {
		t.Fatalf("the running kernel's release %q does not parse", Release())
	}
	if !AtLeast(ma, mi) || AtLeast(ma, mi+1) || AtLeast(ma+1, 0) || !AtLeast(ma-1, 99) {
		t.Errorf("AtLeast around the running %d.%d is wrong", ma, mi)
	}
}
