package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// envHold makes the test binary, run as nobody, the attacker of
// TestNobodyCannotLockOperatorOut: "ADDR N EVERY" opens N keep-alive
// connections to ADDR, sends a request on each every EVERY, prints how
// many were answered, and holds them until stdin closes.
const envHold = "SHIELD_TEST_HOLD"

// envListenUnix makes the test binary, run as nobody, listen on the unix
// socket at its value until stdin closes (TestDialAdminChecksThePeer).
const envListenUnix = "SHIELD_TEST_LISTEN_UNIX"

func TestMain(m *testing.M) {
	if v := os.Getenv(envHold); v != "" {
		hold(v)
		os.Exit(0)
	}
	if p := os.Getenv(envListenUnix); p != "" {
		ln, err := net.Listen("unix", p)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("listening")
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r")
			}
		}()
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hold is the attacker's side (see envHold).
func hold(spec string) {
	f := strings.Fields(spec)
	n, _ := strconv.Atoi(f[1])
	every, _ := time.ParseDuration(f[2])
	var mu sync.Mutex
	var conns []net.Conn
	ask := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprint(c, "GET /read HTTP/1.1\r\nHost: api\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return true
	}
	var wg sync.WaitGroup
	answered := 0
	for range n {
		c, err := net.Dial("tcp", f[0])
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ask(c) {
				mu.Lock()
				answered++
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("answered %d of %d\n", answered, n)
	go func() {
		for {
			time.Sleep(every)
			mu.Lock()
			for _, c := range conns {
				ask(c)
			}
			mu.Unlock()
		}
	}()
	io.Copy(io.Discard, os.Stdin)
}

// guardedAPI serves a stand-in of the API through the service's own
// listener guard and HTTP server: GET /read is open, POST /change needs
// the token.
func guardedAPI(t *testing.T, ln net.Listener) string {
	t.Helper()
	const token = "guard-test-token-0123456789"
	authed := func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+token }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		if !authed(r) {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "changed")
	})
	srv := httpServer(gate(mux, authed), WriteTimeout, slog.New(slog.DiscardHandler))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return token
}

// operator makes one request the way the CLI does (a fresh connection)
// and returns how long it took.
func operator(t *testing.T, method, url, token string) (time.Duration, error) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return time.Since(start), fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return time.Since(start), nil
}

// TestNobodyCannotLockOperatorOut (issue 23, finding 3): as nobody, 64
// keep-alive connections each asking again before the idle timeout held
// every one of the API's MaxConns slots, and the operator's GET and POST
// waited in the backlog for over a minute. The guard counts connections
// per user on loopback (sock_diag's socket owner): nobody holds PerPeer of
// them, and root's requests are answered as fast as before the attack.
func TestNobodyCannotLockOperatorOut(t *testing.T) {
	inner, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	ln := newGuard(inner, slog.New(slog.DiscardHandler))
	token := guardedAPI(t, ln)
	base := "http://" + inner.Addr().String()

	// The reference, measured in this run before the attack.
	var ref time.Duration
	for range 3 {
		d, err := operator(t, http.MethodGet, base+"/read", "")
		require.NoError(t, err)
		ref = max(ref, d)
	}

	cmd := testutil.NobodyCmd(t, fmt.Sprintf("%s=%s %d 1s", envHold, inner.Addr(), MaxConns))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the attacker said nothing")
	t.Logf("attacker as nobody: %s", strings.TrimSpace(line))
	var answered, asked int
	_, err = fmt.Sscanf(line, "answered %d of %d", &answered, &asked)
	require.NoError(t, err)
	assert.LessOrEqual(t, answered, PerPeer, "nobody holds more than PerPeer connections")

	get, err := operator(t, http.MethodGet, base+"/read", "")
	require.NoError(t, err, "the operator's GET during the attack")
	post, err := operator(t, http.MethodPost, base+"/change", token)
	require.NoError(t, err, "the operator's POST during the attack")
	t.Logf("reference %v; during the attack GET %v, POST %v", ref, get, post)
	// Generous: a shared machine stalls; a locked-out operator waits for
	// seconds (the client's 10 s bound), not for a few references.
	assert.Less(t, get, 200*ref+time.Second/10, "GET during the attack against the reference")
	assert.Less(t, post, 200*ref+time.Second/10, "POST during the attack against the reference")
}

// TestReservedSlotsForTheToken (issue 23, finding 3, beyond loopback):
// many peers, each within PerPeer, fill the share of connections without
// the token; a new connection then gets a reserved slot only for a
// request with the token, and one without is answered 503 and closed.
func TestReservedSlotsForTheToken(t *testing.T) {
	inner, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	// Every connection is its own peer, as from many addresses.
	ln := newGuardSized(inner, slog.New(slog.DiscardHandler), 8, 1, 3, func(c net.Conn) string { return c.RemoteAddr().String() })
	token := guardedAPI(t, ln)
	base := "http://" + inner.Addr().String()

	// Five anonymous keep-alive connections fill the share of 8-3.
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	var held []net.Conn
	for range 5 {
		c, err := net.Dial("tcp4", inner.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /read HTTP/1.1\r\nHost: api\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		held = append(held, c)
	}
	_, err = operator(t, http.MethodGet, base+"/read", "")
	require.ErrorContains(t, err, "503", "a request without the token on a reserved slot")
	_, err = operator(t, http.MethodPost, base+"/change", token)
	require.NoError(t, err, "a request with the token on a reserved slot")
	held[0].Close()
	waitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, err = operator(t, http.MethodGet, base+"/read", ""); err == nil || waitCtx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "a request without the token once an anonymous slot is free again")
}
