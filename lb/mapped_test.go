package lb

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestMappedCounted (issue 25, finding 6): IPv6 sockets reaching an IPv4
// service through its IPv4-mapped VIP (connect, sendto) are counted as
// translated, and not as calls to no service.
func TestMappedCounted(t *testing.T) {
	e := newEnv(t, 2)
	tcp := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	udp := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	for _, k := range []lbconf.ServiceKey{tcp, udp} {
		require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(backendAddrs(false, 2)...)}))
	}
	mapped := func(k lbconf.ServiceKey) *unix.SockaddrInet6 {
		return &unix.SockaddrInet6{Addr: netip.AddrFrom16(k.VIP.As16()).As16(), Port: int(k.Port)}
	}
	before, err := e.lb.Counters()
	require.NoError(t, err)
	const n = 5
	v6 := netip.AddrPortFrom(vip6, 1) // any IPv6 address: rawSocket's family
	for i := range n {
		fd, err := e.rawSocket(v6, unix.SOCK_STREAM)
		require.NoError(t, err)
		err = unix.Connect(fd, mapped(tcp))
		unix.Close(fd)
		require.NoError(t, err, "TCP connect %d to the mapped VIP", i)
		fd, err = e.rawSocket(v6, unix.SOCK_DGRAM)
		require.NoError(t, err)
		err = unix.Sendto(fd, []byte("?\n"), 0, mapped(udp))
		var from netip.AddrPort
		if err == nil {
			_, from, err = recvReply(fd, 5000)
		}
		unix.Close(fd)
		require.NoError(t, err, "UDP sendto %d to the mapped VIP", i)
		if want := netip.AddrPortFrom(vip4, udp.Port); from != want {
			assert.Fail(t, fmt.Sprintf("UDP reply %d from %s, want the VIP %s", i, from, want))
		}
	}
	after, err := e.lb.Counters()
	require.NoError(t, err)
	for _, k := range []lbconf.ServiceKey{tcp, udp} {
		if got := after.Services[k][Translated] - before.Services[k][Translated]; got != n {
			assert.Fail(t, fmt.Sprintf("%s: translated grew by %d, want %d", k, got, n))
		}
	}
	if got := after.NotService - before.NotService; got != 0 {
		assert.Fail(t, fmt.Sprintf("not_service grew by %d for %d connects and %d sendtos to mapped VIPs, want 0", got, n, n))
	}
}
