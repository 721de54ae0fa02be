package shield

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// journalPin names the pinned intent of a list change in progress, beside
// the maps. A change pins it before its first write and unpins it after its
// last; a journal found at load time belongs to a change a crash (kill -9)
// interrupted, and is rolled back: a list change is all or nothing, also
// across a crash.
const journalPin = "journal"

// Journal operations: what the change did to the prefix, undone by a
// rollback.
const (
	journalAdded   uint8 = 1 // rollback removes it
	journalRemoved uint8 = 2 // rollback puts it back
)

// journalKey is one prefix of a change (20 bytes).
type journalKey struct {
	List uint8
	Bits uint8
	Is4  uint8
	_    uint8
	Addr [16]byte
}

var journalSpec = ebpf.MapSpec{
	Name:       "shield_journal",
	Type:       ebpf.Hash,
	KeySize:    20,
	ValueSize:  1,
	MaxEntries: uint32(2 * maxListEntries), // one batch: both families full
	Flags:      1,                          // BPF_F_NO_PREALLOC: sized by the change
}

// journal is a pinned intent; a nil *journal (unpinned shield) does nothing.
type journal struct {
	m    *ebpf.Map
	path string
}

// beginJournal pins the intent to apply op to prefixes of list l. Nothing
// is written to the lists before it is pinned.
func (s *Shield) beginJournal(l List, op uint8, prefixes []netip.Prefix) (*journal, error) {
	if s.pinPath == "" || len(prefixes) == 0 {
		return nil, nil
	}
	m, err := ebpf.NewMap(&journalSpec)
	if err != nil {
		return nil, fmt.Errorf("create change journal: %w", err)
	}
	for _, p := range prefixes {
		k := journalKey{List: uint8(l), Bits: uint8(p.Bits()), Addr: p.Addr().As16()}
		if p.Addr().Is4() {
			k.Is4 = 1
		}
		if err := m.Put(k, op); err != nil {
			m.Close()
			return nil, fmt.Errorf("write change journal: %w", err)
		}
	}
	path := filepath.Join(s.pinPath, journalPin)
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin change journal: %w", err)
	}
	return &journal{m: m, path: path}, nil
}

// commit drops the intent: the change is whole.
func (j *journal) commit() error {
	if j == nil {
		return nil
	}
	defer j.m.Close()
	if err := j.m.Unpin(); err != nil {
		return fmt.Errorf("unpin change journal: %w", err)
	}
	return nil
}

// Recovery says what Load rolled back of a change a crash interrupted.
type Recovery struct {
	Added, Removed map[List]int // prefixes taken off again, put back
}

func (r Recovery) String() string {
	return fmt.Sprintf("rolled back a list change a crash interrupted: %d allow and %d deny prefixes it had added taken off again, "+
		"%d allow and %d deny prefixes it had removed put back",
		r.Added[AllowList], r.Added[DenyList], r.Removed[AllowList], r.Removed[DenyList])
}

// Recovered reports what Load rolled back, if anything.
func (s *Shield) Recovered() (Recovery, bool) {
	if s.recovered == nil {
		return Recovery{}, false
	}
	return *s.recovered, true
}

// rollback undoes the change of a journal left pinned by a crash, in the
// membership tries (Load then rewrites the verdicts and the flags from
// them), and unpins it. It is idempotent: a crash during the rollback is
// rolled back again at the next load.
func (s *Shield) rollback() error {
	path := filepath.Join(s.pinPath, journalPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open change journal %s: %w", path, err)
	}
	defer m.Close()
	r := Recovery{Added: map[List]int{}, Removed: map[List]int{}}
	var k journalKey
	var op uint8
	one := uint8(1)
	it := m.Iterate()
	for it.Next(&k, &op) {
		l := List(k.List)
		a := netip.AddrFrom16(k.Addr)
		if k.Is4 == 1 {
			a = a.Unmap()
		}
		p := netip.PrefixFrom(a, int(k.Bits))
		v4, v6 := s.tries(l)
		t := v4
		if !a.Is4() {
			t = v6
		}
		switch op {
		case journalAdded:
			if err := t.m.Delete(t.key(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("roll back %s on the %s list: %w", p, l, err)
			}
			r.Added[l]++
		case journalRemoved:
			if err := t.m.Put(t.key(p), one); err != nil {
				return fmt.Errorf("roll back the removal of %s from the %s list: %w", p, l, err)
			}
			r.Removed[l]++
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read change journal: %w", err)
	}
	if err := m.Unpin(); err != nil {
		return fmt.Errorf("unpin change journal: %w", err)
	}
	s.recovered = &r
	return nil
}
