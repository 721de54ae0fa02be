package testutil

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
)

// FillSources writes distinct sources (2001:db8::/96 plus a counter)
// through put (shield.Table.Put: the table is an array of sets, and only the
// shield knows which set a key hashes to) until n are held, with spread
// passed and dropped counts so a ranking has work to do. put refuses a
// source whose set is full (full, shield.ErrSetFull) and FillSources goes on
// with the next, so filling a table near its size takes more than n
// insertions; it fails after 8n.
func FillSources(put func(bpf.ShieldSrcKey, bpf.ShieldSource) error, full error, n int) error {
	base := netip.MustParseAddr("2001:db8::").As16()
	held := 0
	for i := 0; held < n; i++ {
		if i >= 8*n {
			return fmt.Errorf("fill sources: %d of %d held after %d insertions", held, n, i)
		}
		v := uint32(i)
		a := base
		a[12], a[13], a[14], a[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		src := bpf.ShieldSource{Passed: uint64(v % 1000), Dropped: uint64(v*2654435761) % 100_000}
		err := put(bpf.ShieldSrcKey{Addr: a}, src)
		if errors.Is(err, full) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fill sources at %d: %w", i, err)
		}
		held++
	}
	return nil
}
