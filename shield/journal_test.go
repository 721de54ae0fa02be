package shield

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestRollbackAfterCrash (issue 10, finding 4): a change interrupted after
// its journal was pinned is rolled back by the next Load, both ways: an
// interrupted add takes its prefixes off again, an interrupted remove puts
// them back, and the flags the program reads follow.
func TestRollbackAfterCrash(t *testing.T) {
	testutil.Root(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-journal-%d", os.Getpid()))
	if err := EnsureBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pfx := func(ss ...string) []netip.Prefix {
		ps, err := ParsePrefixes(ss)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	kept := pfx("198.18.1.0/24", "2001:db8:1::/48")
	s1 := loadT(t, Options{PinPath: dir})
	if _, err := s1.Add(DenyList, kept); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, s1)

	// An add interrupted after two of its three writes.
	added := pfx("198.18.2.0/24", "198.18.3.0/24", "2001:db8:2::/48")
	if _, err := s1.beginJournal(DenyList, journalAdded, added); err != nil {
		t.Fatal(err)
	}
	v4, _ := s1.tries(DenyList)
	for _, p := range added[:2] {
		if err := v4.m.Put(v4.key(p), uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
	s1.Close() // the crash: no commit

	s2 := loadT(t, Options{PinPath: dir})
	r, ok := s2.Recovered()
	if !ok || r.Added[DenyList] != 3 {
		t.Errorf("Recovered() = %+v, %v; want 3 deny prefixes taken off", r, ok)
	}
	if got := snapshot(t, s2); !slices.Equal(got.Deny, before.Deny) || got.Config != before.Config {
		t.Errorf("after the rollback of an add: deny %v config %+v, want %v %+v", got.Deny, got.Config, before.Deny, before.Config)
	}

	// A remove interrupted after the flags went and one entry was deleted:
	// the IPv6 trie empties, so its flag is cleared first.
	if _, err := s2.beginJournal(DenyList, journalRemoved, kept[1:]); err != nil {
		t.Fatal(err)
	}
	flags, err := s2.flagsWith(DenyList, map[netip.Prefix]bool{kept[0]: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.publishFlags(s2.limits, flags); err != nil {
		t.Fatal(err)
	}
	if err := s2.removeLocked(DenyList, kept[1:]); err != nil {
		t.Fatal(err)
	}
	s2.Close()

	s3 := loadT(t, Options{PinPath: dir})
	if r, ok := s3.Recovered(); !ok || r.Removed[DenyList] != 1 {
		t.Errorf("Recovered() = %+v, %v; want 1 deny prefix put back", r, ok)
	}
	if got := snapshot(t, s3); !slices.Equal(got.Deny, before.Deny) || got.Config != before.Config {
		t.Errorf("after the rollback of a remove: deny %v config %+v, want %v %+v", got.Deny, got.Config, before.Deny, before.Config)
	}
	if _, err := os.Stat(filepath.Join(dir, journalPin)); !os.IsNotExist(err) {
		t.Errorf("the journal is still pinned after the rollback: %v", err)
	}
}
