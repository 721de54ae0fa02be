package service

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnectionsBounded (issue 10, finding 5): 40 clients that never read
// kept their answers queued; the API now holds at most a bounded number of
// connections, and one more is accepted only when one closes.
func TestConnectionsBounded(t *testing.T) {
	inner, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	ln := newGuardSized(inner, nil, 2, 2, 0, func(c net.Conn) string { return c.RemoteAddr().String() })
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp4", inner.Addr().String())
		require.NoError(t, err)
		defer c.Close()
	}
	var held []net.Conn
	for range 2 {
		select {
		case c := <-accepted:
			held = append(held, c)
		case <-time.After(5 * time.Second):
			require.Fail(t, "the first two connections were not accepted")
		}
	}
	select {
	case <-accepted:
		require.Fail(t, "a third connection was accepted with two open and a bound of two")
	case <-time.After(200 * time.Millisecond):
	}
	held[0].Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		require.Fail(t, "the third connection was not accepted after one closed")
	}
	held[1].Close()
}

// TestWriteDeadline (issue 10, finding 5): a client that asks and never
// reads must not hold an answer, and its connection, for longer than the
// write bound.
func TestWriteDeadline(t *testing.T) {
	wrote := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1<<20)
		var err error
		for i := 0; i < 256 && err == nil; i++ {
			_, err = w.Write(buf)
		}
		wrote <- err
	})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpServer(h, 300*time.Millisecond, slog.New(slog.DiscardHandler))
	go srv.Serve(ln)
	defer srv.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: api\r\n\r\n")
	start := time.Now()
	select {
	case err := <-wrote:
		require.Error(t, err, "the answer's 256 MiB were written to a client that never read")
		t.Logf("the answer was cut off after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		require.Fail(t, "a client that never reads held its answer for 10 s against a write bound of 300 ms")
	}
}

func TestValidateAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		api  API
		want string // in the error; "" for none
	}{
		{"loopback", API{Listen: "127.0.0.1:9470"}, ""},
		{"loopback v6", API{Listen: "[::1]:9470"}, ""},
		{"host name", API{Listen: "not-a-host:9470"}, `api.listen "not-a-host:9470"`},
		{"no address", API{Listen: ":9470"}, `api.listen ":9470"`},
		{"exposed bare", API{Listen: "0.0.0.0:9470"}, "beyond loopback"},
		{"exposed no TLS", API{Listen: "198.18.0.1:9470", Token: "t", AuthReads: true}, "TLS"},
		{"exposed reads open", API{Listen: "198.18.0.1:9470", Token: "t"}, "reads behind the token"},
		{"exposed dangerously", API{Listen: "0.0.0.0:9470", DangerouslyExpose: true}, ""},
		{"half TLS", API{Listen: "127.0.0.1:9470", TLSKey: "k"}, "give both or neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateAPI(tc.api)
			if tc.want == "" {
				assert.NoError(t, err, "ValidateAPI(%+v)", tc.api)
			} else {
				assert.ErrorContains(t, err, tc.want, "ValidateAPI(%+v)", tc.api)
			}
		})
	}
}
