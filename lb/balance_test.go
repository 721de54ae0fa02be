package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestDrainRemove: draining, then removing, a backend keeps the sockets
// already connected to it working and steers every new one away.
func TestDrainRemove(t *testing.T) {
	e := newEnv(t, 3)
	for _, v6 := range []bool{false, true} {
		t.Run(family(v6), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vipOf(v6), Port: 80, Proto: lbconf.TCP}
			bes := backendAddrs(v6, 3)
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)
			gone := bes[0]

			// 30 random connects miss a given backend of 3 with probability
			// (2/3)^30 = 5e-6.
			var onGone []*conn
			for range 30 {
				c, err := e.dial(vip, netip.AddrPort{})
				require.NoError(t, err)
				defer c.Close()
				r, err := c.ask()
				require.NoError(t, err)
				if r.local == gone {
					onGone = append(onGone, c)
				}
			}
			require.False(t, len(onGone) == 0, "no connection of 30 reached %s", gone)
			check := func(step string) {
				t.Helper()
				for i, c := range onGone {
					r, err := c.ask()
					assert.False(t, err != nil || r.local != gone, "%s: established connection %d to %s: %+v, %v; want it kept", step, i, gone, r, err)
				}
				for i := range 60 {
					r, err := e.ask1(vip, netip.AddrPort{})
					require.NoError(t, err, "%s: new connect %d", step, i)
					require.False(t, r.local == gone || !slices.Contains(bes, r.local), "%s: new connect %d reached %s, want one of %v", step, i, r.local, bes[1:])
				}
			}
			require.NoError(t, e.lb.DrainBackends(k, []netip.AddrPort{gone}))
			check("drained")
			require.NoError(t, e.lb.RemoveBackends(k, []netip.AddrPort{gone}))
			check("removed")
		})
	}
}

// chiSquare is Pearson's statistic of counts against a uniform spread.
func chiSquare(counts map[netip.AddrPort]int, keys []netip.AddrPort, total int) float64 {
	exp := float64(total) / float64(len(keys))
	var x float64
	for _, k := range keys {
		d := float64(counts[k]) - exp
		x += d * d / exp
	}
	return x
}

// chiCritical001 is the chi-square critical value at p = 0.001, by degrees
// of freedom: a uniform spread fails it one run in a thousand.
var chiCritical001 = map[int]float64{1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515}

// TestMaglev: 10,000 connects from bound source ports spread evenly over N
// backends (chi-square), and removing one of them moves about 1/N of the
// same connects' choices: those it held, and hardly any other.
//
// The connects are UDP connect(2)s: the same connect4 program and choice
// as TCP's (TestTCP and TestDrainRemove cover the handshake), without a
// handshake and a server wake-up per connect, which made a round of TCP
// connects take minutes under TCG. Each socket's backend is read from its
// reverse-translation entry (its cookie and each backend: a few map
// lookups), and every 50th socket also asks the backend itself, which
// must agree.
func TestMaglev(t *testing.T) {
	const (
		n       = 5
		connect = 10_000
		port0   = 20000
	)
	e := newEnv(t, n)
	k := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	bes := backendAddrs(false, n)
	require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Maglev, Backends: backends(bes...)}))
	vip := netip.AddrPortFrom(k.VIP, k.Port)
	which := func(fd int) (netip.AddrPort, error) {
		var found []netip.AddrPort
		for _, b := range bes {
			if got, ok, err := e.lb.Reverse(fd, b); err != nil {
				return netip.AddrPort{}, err
			} else if ok && got == vip {
				found = append(found, b)
			}
		}
		if len(found) != 1 {
			return netip.AddrPort{}, fmt.Errorf("socket %d has translations to %v, want exactly one backend", fd, found)
		}
		return found[0], nil
	}
	one := func(i int, buf []byte) (netip.AddrPort, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return netip.AddrPort{}, err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: clientAddr4.As4(), Port: port0 + i}); err != nil {
			return netip.AddrPort{}, fmt.Errorf("bind port %d: %w", port0+i, err)
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: vip.Addr().As4(), Port: int(vip.Port())}); err != nil {
			return netip.AddrPort{}, fmt.Errorf("connect: %w", err)
		}
		got, err := which(fd)
		if err != nil || i%50 != 0 {
			return got, err
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		if _, err := unix.Write(fd, []byte("?\n")); err != nil {
			return got, err
		}
		// A raw blocking read is interrupted by the Go runtime's
		// preemption signal (EINTR seen on 7.2 under TCG): read again.
		m, err := unix.Read(fd, buf)
		for err == unix.EINTR {
			m, err = unix.Read(fd, buf)
		}
		if err != nil {
			return got, fmt.Errorf("ask the backend: %w", err)
		}
		r, err := parseReply(string(buf[:m]))
		if err != nil {
			return got, err
		}
		if r.local != got {
			return got, fmt.Errorf("the backend says it is %s, the reverse entry names %s", r.local, got)
		}
		return got, nil
	}
	round := func() ([]netip.AddrPort, map[netip.AddrPort]int) {
		t.Helper()
		got := make([]netip.AddrPort, connect)
		buf := make([]byte, 256)
		err := e.client.Do(func() error {
			for i := range connect {
				var err error
				if got[i], err = one(i, buf); err != nil {
					return fmt.Errorf("connect %d: %w", i, err)
				}
			}
			return nil
		})
		require.NoError(t, err)
		counts := map[netip.AddrPort]int{}
		for _, a := range got {
			counts[a]++
		}
		return got, counts
	}
	before, counts := round()
	if x := chiSquare(counts, bes, connect); x > chiCritical001[n-1] {
		assert.Fail(t, fmt.Sprintf("spread over %d backends %v: chi-square %.1f > %.1f (p=0.001, %d dof)", n, counts, x, chiCritical001[n-1], n-1))
	} else {
		t.Logf("spread %v: chi-square %.2f (critical %.1f)", counts, x, chiCritical001[n-1])
	}
	// The same sockets hash the same: a second round is identical.
	if !testing.Short() {
		again, _ := round()
		if d := diff(before, again); d != 0 {
			assert.Fail(t, fmt.Sprintf("%d of %d choices changed with no change to the backends, want 0", d, connect))
		}
	}

	gone := bes[2]
	require.NoError(t, e.lb.RemoveBackends(k, []netip.AddrPort{gone}))
	after, counts := round()
	moved, held, strayed := 0, 0, 0
	for i := range before {
		if before[i] == gone {
			held++
		}
		require.False(t, after[i] == gone, "connect %d reached removed backend %s", i, gone)
		if before[i] != after[i] {
			moved++
			if before[i] != gone {
				strayed++
			}
		}
	}
	t.Logf("removing 1 of %d backends: %d of %d choices moved (%.1f%%; %d were the removed backend's, %d others)",
		n, moved, connect, 100*float64(moved)/connect, held, strayed)
	// Maglev's table is only nearly minimal-disruption: allow 2% of the
	// survivors' choices to move besides the ones that must.
	if limit := connect/n + connect/50; moved > limit {
		assert.Fail(t, fmt.Sprintf("%d of %d choices moved, want at most about 1/%d (%d)", moved, connect, n, limit))
	}
	rest := slices.DeleteFunc(slices.Clone(bes), func(a netip.AddrPort) bool { return a == gone })
	if x := chiSquare(counts, rest, connect); x > chiCritical001[n-2] {
		assert.Fail(t, fmt.Sprintf("spread over the %d left %v: chi-square %.1f > %.1f", n-1, counts, x, chiCritical001[n-2]))
	}
}

func diff(a, b []netip.AddrPort) int {
	d := 0
	for i := range a {
		if a[i] != b[i] {
			d++
		}
	}
	return d
}

// TestMaglevTable: the population itself, without the kernel: even shares
// and minimal disruption on a table of the program's size.
func TestMaglevTable(t *testing.T) {
	const m = 16381
	for _, n := range []int{1, 2, 5, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var bs []backend
			for i := range n {
				bs = append(bs, backend{id: uint32(i + 1), addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}), 80)})
			}
			tab := maglevTable(bs, m)
			share := map[uint32]int{}
			for _, id := range tab {
				share[id]++
			}
			for _, b := range bs {
				if s := share[b.id]; s < m/n-1 || s > m/n+1 {
					assert.Fail(t, fmt.Sprintf("backend %d holds %d slots, want %d±1", b.id, s, m/n))
				}
			}
			if n == 1 {
				return
			}
			gone := bs[n/2].id
			rest := slices.DeleteFunc(slices.Clone(bs), func(b backend) bool { return b.id == gone })
			tab2 := maglevTable(rest, m)
			moved := 0
			for i := range tab {
				if tab[i] != gone && tab[i] != tab2[i] {
					moved++
				}
			}
			assert.False(t, moved > m/50, "removing one of %d moved %d slots it did not hold, want at most %d", n, moved, m/50)
		})
	}
}
