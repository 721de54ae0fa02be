package shield_test

import (
	"context"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
)

// tableSize makes a table whose mapping (64 bytes a source) has a size no
// other map of the shield is mapped with (the presence filter takes 4 MiB,
// global data a page or two), so its mappings can be told apart.
const tableSize = 1 << 15

// tableMappings counts this process's mappings of BPF maps of a table of
// tableSize sources.
func tableMappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err, "read /proc/self/maps")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "bpf-map") {
			continue
		}
		from, to, _ := strings.Cut(strings.Fields(line)[0], "-")
		lo, err1 := strconv.ParseUint(from, 16, 64)
		hi, err2 := strconv.ParseUint(to, 16, 64)
		if err1 == nil && err2 == nil && hi-lo == tableSize*64 {
			n++
		}
	}
	return n
}

// TestTableMappedOnceConcurrently: the API serves Source and Top from
// several goroutines at once, and the table is mapped on first use. Every
// caller must share one mapping, which Close unmaps: a mapping left behind
// holds the table (64 MiB by default) until the process exits. Run with
// -race as well: the lazy mapping is shared state.
func TestTableMappedOnceConcurrently(t *testing.T) {
	// The race is between Go goroutines; every kernel maps the table in
	// the tests that read sources, so the VM matrix, where each Load is
	// verified under TCG (11.5 s a kernel for 4 loads), leaves it here.
	testutil.HostOnly(t, "one lazy mapping shared by racing goroutines")
	testutil.Root(t)
	before := tableMappings(t)
	const loads = 20
	for range loads {
		sh, err := shield.Load(shield.Options{Clock: config.ClockVirtual, TableSize: tableSize})
		require.NoError(t, err, "Load")
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				var err error
				if i%2 == 0 {
					_, _, err = sh.Source(netip.MustParseAddr("198.18.0.1"))
				} else {
					_, err = sh.CountSources(context.Background())
				}
				assert.NoError(t, err, "goroutine %d", i)
			}()
		}
		start.Done()
		wg.Wait()
		require.NoError(t, sh.Close(), "Close")
	}
	// Only the table's mappings are counted: cilium/ebpf unmaps the global
	// data it maps (.bss) when the collection is collected, not on Close,
	// so their count follows the garbage collector.
	got := tableMappings(t)
	assert.LessOrEqual(t, got, before, "mappings of the sources table after Close = %d, want at most %d (as before Load)", got, before)
}

// TestCloseDuringWalk: Close may run while an API request still walks the
// table (the service's shutdown gives requests 5 s, then closes): the walk
// must end with an error, not fault on an unmapped table.
func TestCloseDuringWalk(t *testing.T) {
	testutil.Root(t)
	sh, err := shield.Load(shield.Options{Clock: config.ClockVirtual, TableSize: shield.DefaultTableSize})
	require.NoError(t, err, "Load")
	_, err = sh.CountSources(context.Background())
	require.NoError(t, err, "CountSources")
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := sh.CountSources(context.Background()); err != nil {
					return // closed
				}
			}
		}()
	}
	for range 3 {
		runtime.Gosched()
	}
	require.NoError(t, sh.Close(), "Close")
	wg.Wait()
}
