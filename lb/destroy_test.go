package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestRemovedSockets: removing a backend terminates the balanced sockets
// still on it where the kernel lets socket iterators call
// bpf_sock_destroy (6.5+); elsewhere the probe fails cleanly, names why,
// and the sockets are left open, working, and counted. A drained backend's
// sockets are neither; a socket on another backend is untouched. With
// SHIELD_LB_DESTROY_OFF the fallback runs on any kernel.
func TestRemovedSockets(t *testing.T) {
	for _, off := range []bool{false, true} {
		name := "probed"
		if off {
			name = "off"
			t.Setenv(destroyOffEnv, "1")
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			mode, why := e.lb.DestroyMode()
			t.Logf("destroy mode %s (%s)", mode, why)
			if off {
				require.Equal(t, DestroyLeftOpen, mode)
				assert.Contains(t, why, destroyOffEnv)
			} else if mode == DestroyLeftOpen {
				require.NotEmpty(t, why, "the fallback names why")
				// 6.5+ has bpf_sock_destroy: only a build refusing
				// iterator programs (EPERM) may fall back there.
				assert.False(t, kernelAtLeast(t, 6, 5) && !strings.Contains(why, "operation not permitted"), "kernel 6.5+ fell back to %s: %s", mode, why)
			}
			bes := backendAddrs(false, 2)
			k := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
			u := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
			require.NoError(t, e.lb.AddServices([]lbconf.Service{
				{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)},
				{ServiceKey: u, Mode: lbconf.Random, Backends: backends(bes...)},
			}))
			// TCP connections until both backends have one.
			on := map[netip.AddrPort]*conn{}
			for i := 0; i < 60 && len(on) < 2; i++ {
				c, err := e.dial(netip.AddrPortFrom(k.VIP, k.Port), netip.AddrPort{})
				require.NoError(t, err)
				r, err := c.ask()
				require.NoError(t, err)
				if on[r.local] == nil {
					on[r.local] = c
					t.Cleanup(func() { c.Close() })
				} else {
					c.Close()
				}
			}
			require.Len(t, on, 2)
			gone, kept := bes[0], bes[1]
			// A UDP socket on the removed backend.
			var ufd int
			for i := 0; i < 60; i++ {
				fd, err := e.udpConnect(t, netip.Addr{}, netip.AddrPortFrom(u.VIP, u.Port))
				require.NoError(t, err)
				if _, ok, _ := e.lb.Reverse(fd, gone); ok {
					ufd = fd
					break
				}
			}
			require.NotZero(t, ufd, "no UDP socket chose %s", gone)

			// Draining destroys nothing.
			require.NoError(t, e.lb.DrainBackends(k, []netip.AddrPort{gone}))
			_, err := on[gone].ask()
			require.NoError(t, err, "a draining backend's connection")

			require.NoError(t, e.client.Do(func() error {
				return errors.Join(e.lb.RemoveBackends(k, []netip.AddrPort{gone}), e.lb.RemoveBackends(u, []netip.AddrPort{gone}))
			}))
			rs := e.lb.RemovedSockets()
			_, err = on[kept].ask()
			assert.NoError(t, err, "the connection on the kept backend")
			_, err = on[gone].ask()
			if mode == DestroySockets {
				assert.Equal(t, RemovedSockets{Destroyed: 2}, rs)
				assert.Error(t, err, "the connection on the removed backend")
				_, werr := unix.Write(ufd, []byte("?\n"))
				assert.Error(t, werr, "the UDP socket on the removed backend")
			} else {
				assert.Equal(t, RemovedSockets{LeftOpen: 2}, rs, "1 TCP + 1 UDP left open")
				assert.NoError(t, err, "left open: the connection still works")
			}
			// Closing releases the counts: a later removal finds none.
			on[kept].Close()
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, e.lb.RemoveService(k))
			assert.Equal(t, rs, e.lb.RemovedSockets(), "a closed socket counted on removal")
		})
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	var ma, mi int
	_, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	require.NoError(t, err)
	return ma > major || (ma == major && mi >= minor)
}
