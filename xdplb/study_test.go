package xdplb_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkNamespacesRTT compares, in one run and one topology (newLab),
// a request's round trip over an open connection and a new connection's
// (connect, request, close) through two paths to the same backends:
//
//	direct: the client to a backend's own address (the floor: the same
//	        router hops, no balancer)
//	xdplb:  the VIP, balanced by xdplb on the edge, answered by DSR
//
// IPVS (ipvsadm, tunnel mode) and nftables DNAT are not in it yet
// (docs/xdplb.md says why). Run:
//
//	go test -run XXX -bench NamespacesRTT -count 5 ./xdplb
func BenchmarkNamespacesRTT(b *testing.B) {
	l := newLab(b)
	require.NoError(b, l.b.Apply(l.cfg(false)))
	attach(b, l.edge, "e0", l.b.Program())
	paths := []struct{ name, addr string }{
		{"direct", net.JoinHostPort("198.18.31.2", fmt.Sprint(tcpPort))},
		{"xdplb", net.JoinHostPort(nsVIP4, fmt.Sprint(tcpPort))},
	}
	ask := func(c net.Conn, r *bufio.Reader) error {
		c.SetDeadline(time.Now().Add(nsWait))
		if _, err := c.Write([]byte("who\n")); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}
	for _, p := range paths {
		b.Run(p.name+"/request", func(b *testing.B) {
			f := dial(b, l.client, "tcp", p.addr)
			r := bufio.NewReader(f.c)
			for i := 0; i < b.N; i++ {
				require.NoError(b, ask(f.c, r))
			}
		})
		b.Run(p.name+"/connect", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var c net.Conn
				require.NoError(b, l.client.Do(func() (err error) {
					c, err = net.DialTimeout("tcp", p.addr, nsWait)
					return err
				}))
				require.NoError(b, ask(c, bufio.NewReader(c)))
				c.Close()
			}
		})
	}
}
