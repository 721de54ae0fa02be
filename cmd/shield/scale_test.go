package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"xdpshield/bpf"
	"xdpshield/internal/testutil"
	"xdpshield/shield"
)

const millionSources = 1_000_000

// TestServeMillionSources fills the running service's table with 1,000,000
// sources and measures what the issue bounds: /v1/top answers within 1 s
// (median of several calls), traffic keeps flowing while the table is
// walked, and the service's peak RSS stays under 100 MiB.
func TestServeMillionSources(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 1M-entry table (-short)")
	}
	l := newLab(t, "scale")
	ctx := context.Background()
	s := l.serve(t)
	// Let the probe flow at its own pace.
	if _, err := l.client.SetLimits(ctx, shield.Limits{Rate: 1_000_000, Burst: 1_000_000, AdmissionRate: 10000, AdmissionBurst: 10000}); err != nil {
		t.Fatal(err)
	}

	m, err := ebpf.LoadPinnedMap(filepath.Join(l.pinDir(t), bpf.ShieldMapSources), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fillStart := time.Now()
	if err := testutil.FillSources(m, millionSources); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %d sources in %v", millionSources, time.Since(fillStart).Round(time.Millisecond))

	c, err := l.client.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An LRU hash may evict a little before it is full (per-CPU free lists).
	if c.Sources.Tracked < millionSources*99/100 {
		t.Fatalf("tracked %d sources, want about %d", c.Sources.Tracked, millionSources)
	}

	_, received := l.receiver(t, 9998)
	probe := l.sender(t, "198.18.0.3", 9998, 500*time.Microsecond, 0)
	var lat []time.Duration
	var walk []float64
	for i := 0; i < 5; i++ {
		n := 100
		if i == 4 {
			n = shield.MaxTop
		}
		start := time.Now()
		top, err := l.client.Top(ctx, n, shield.ByDropped)
		if err != nil {
			t.Fatalf("Top: %v", err)
		}
		lat = append(lat, time.Since(start))
		walk = append(walk, top.ElapsedMs)
		if top.Scanned < c.Sources.Tracked*99/100 || len(top.Sources) != n {
			t.Fatalf("Top scanned %d and returned %d, want about %d and %d", top.Scanned, len(top.Sources), c.Sources.Tracked, n)
		}
		if !slices.IsSortedFunc(top.Sources, func(a, b shield.Source) int { return -cmpU(a.Dropped, b.Dropped) }) {
			t.Fatal("Top is not sorted by dropped")
		}
	}
	probe.halt()
	time.Sleep(100 * time.Millisecond)
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	t.Logf("GET /v1/top with %d sources: %v (walk ms %v)", c.Sources.Tracked, lat, walk)
	if med := sorted[len(sorted)/2]; med > time.Second && testutil.Emulated() {
		t.Logf("median /v1/top latency %v: not held to the 1 s bound under CPU emulation (TCG)", med)
	} else if med > time.Second {
		t.Errorf("median /v1/top latency %v with %d sources, want < 1 s", med, c.Sources.Tracked)
	}
	if got, sent := received.Load(), probe.sent.Load(); got != sent {
		t.Errorf("during the walks %d of %d probe datagrams arrived", got, sent)
	} else {
		t.Logf("probe flow during the walks: %d/%d datagrams arrived", got, sent)
	}

	if _, err := l.client.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
	rss, hwm := procMem(t, s.cmd.Process.Pid)
	t.Logf("service memory with %d sources: VmRSS %.1f MiB, VmHWM (peak) %.1f MiB", c.Sources.Tracked, rss, hwm)
	if hwm >= 100 {
		t.Errorf("service peak RSS %.1f MiB, want < 100 MiB", hwm)
	}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// procMem reads VmRSS and VmHWM of pid, in MiB.
func procMem(t *testing.T, pid int) (rss, hwm float64) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			t.Fatalf("parse %s %q: %v", k, v, err)
		}
		if k == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
	}
	return rss, hwm
}
