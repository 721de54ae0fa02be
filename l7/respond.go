package l7

import (
	"bufio"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/bpf"
)

// Order (issue 24, finding 2). The kernel redirects a request to a pooled
// socket only when the proxy owes the connection nothing and every request
// redirected before has had its whole response relayed (bpf/l7.c decide:
// conn.fast == ctl.done): at most one request of a connection is at a
// backend through the kernel. Its response is read here, framed by
// net/http, written to the client with the hop-by-hop headers handled as
// the proxy handles them (finding 7), and counted (ctl.done). Whatever the
// proxy writes to the client waits for the responses owed to requests
// redirected before (clientConn.Write): a request the kernel hands up
// while one is at a backend (busy) is answered after it. So a
// connection's responses leave in its requests' order on every path.
//
// The pooled sockets are read on every kernel, with TCP relays (5.10)
// too: no stream parser runs on them (none is attached to the upstreams
// sockhash), so a read takes nothing a parser waits for (relay.go watch).
//
// The cost, against the kernel redirecting responses itself: a read and
// a write in user space per response (docs/l7.md, "Order").

// awaitMax bounds the wait for an owed response before the proxy writes:
// past it the client connection is closed rather than answered out of
// order.
const awaitMax = 30 * time.Second

// hopHeaders are the hop-by-hop headers of RFC 9110 7.6.1 that
// net/http/httputil.ReverseProxy removes from a response (with those the
// Connection header names).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// owed reports whether the last request the kernel redirected on cc went
// to the pooled socket upCookie and its response is not relayed yet.
func (fp *FastPath) owed(cc *clientConn, upCookie uint64) bool {
	c, ok := fp.kernelConn(cc)
	return ok && c.Fast > cc.done.Load() && c.FastUp == upCookie
}

// kernelConn reads cc's kernel state (false once closed).
func (fp *FastPath) kernelConn(cc *clientConn) (bpf.L7Conn, bool) {
	var c bpf.L7Conn
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.shut {
		return c, false
	}
	return c, fp.objs.Conns.Lookup(cc.cookie, &c) == nil
}

// respond relays the responses of the pooled socket up (to backend b) to
// cc, in order, until the backend closes it or sends what nothing asked
// for; then it empties the pool slot.
func (fp *FastPath) respond(cc *clientConn, b int, up net.Conn, upCookie uint64) {
	br := bufio.NewReader(up)
	untouched := true // the request owed here (if any) has had no byte written
	for {
		resp, err := http.ReadResponse(br, nil) // the kernel takes GET, POST, PUT, DELETE: never HEAD
		if err != nil {
			break
		}
		if !fp.owed(cc, upCookie) {
			fp.logf("conn %d: backend %d answered what no request asked: dropped", cc.cookie, b)
			resp.Body.Close()
			break
		}
		final := resp.StatusCode >= 200
		closing := final && resp.Close
		if closing {
			// The backend closes after this response: no request
			// goes to it any more.
			fp.unpool(cc, b, up)
		}
		untouched = false
		var counted bool
		werr := fp.writeResponse(cc, resp, func() {
			// The last bytes are still to be sent, the client socket's
			// writes held (wmu): counting now lets the kernel take the
			// client's next request, which a closed-loop client sends
			// on reading them, while what answers it waits for wmu.
			if final {
				fp.responded(cc)
				counted = true
			}
		})
		resp.Body.Close()
		untouched = counted
		if werr != nil {
			fp.logf("conn %d: relaying a response of backend %d: %v", cc.cookie, b, werr)
			cc.Conn.Close() // a partial response: the client must not wait for its rest
			if !counted {
				fp.responded(cc)
			}
			untouched = true
			break
		}
		if !final {
			continue
		}
		if closing {
			break
		}
	}
	fp.unpool(cc, b, up)
	up.Close() // no redirect to it succeeds from here
	fp.forgetPeer(upCookie)
	if fp.owed(cc, upCookie) {
		if untouched {
			// Closed before answering: the proxy answers 502 then
			// (its ErrorHandler); so does the fast path.
			gw := &http.Response{StatusCode: http.StatusBadGateway, ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Date": {time.Now().UTC().Format(http.TimeFormat)}}}
			cc.wmu.Lock()
			gw.Write(cc.Conn)
			cc.wmu.Unlock()
		} else {
			cc.Conn.Close()
		}
		fp.responded(cc)
	}
}

// unpool takes up out of cc's pool (if still there) and forgets it.
func (fp *FastPath) unpool(cc *clientConn, b int, up net.Conn) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.pooled[b] == up && !fp.shut { // not dropped by a policy change (dropPooled)
		fp.objs.Pool.Delete(bpf.L7PoolKey{Client: cc.cookie, Backend: uint32(b)})
		delete(cc.pooled, b)
	}
}

// forgetPeer drops up's peer entry (it is closed).
func (fp *FastPath) forgetPeer(upCookie uint64) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if !fp.shut {
		fp.objs.Peer.Delete(upCookie)
	}
}

// responded counts a response relayed: the kernel may redirect cc's next
// request, and writers waiting for it go on.
func (fp *FastPath) responded(cc *clientConn) {
	cc.done.Add(1)
	fp.responses.Add(1)
	fp.mu.Lock()
	if !fp.shut {
		if err := fp.writeCtl(cc); err != nil {
			fp.logf("ctl of %d: %v", cc.cookie, err)
		}
	}
	fp.mu.Unlock()
	cc.mu.Lock()
	close(cc.progress)
	cc.progress = make(chan struct{})
	cc.mu.Unlock()
}

// writeResponse writes resp to cc's client as the proxy would: the
// hop-by-hop headers removed, the status text the standard one, framed by
// its length or else chunked.
// last runs before the last bytes are sent, the client's writes held.
func (fp *FastPath) writeResponse(cc *clientConn, resp *http.Response, last func()) error {
	h := resp.Header
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	out := &http.Response{StatusCode: resp.StatusCode, ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: resp.Body, ContentLength: resp.ContentLength}
	if resp.ContentLength < 0 && resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent &&
		resp.StatusCode != http.StatusNotModified {
		out.TransferEncoding = []string{"chunked"}
	}
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	bw := bufio.NewWriter(cc.Conn)
	if err := out.Write(bw); err != nil {
		return err
	}
	last()
	return bw.Flush()
}

// awaitOwed waits until every request the kernel redirected on cc has had
// its response relayed (at most awaitMax: then it closes the connection
// and returns false).
func (fp *FastPath) awaitOwed(cc *clientConn) bool {
	if !cc.hasPool.Load() {
		return true // nothing was ever redirected
	}
	c, ok := fp.kernelConn(cc)
	if !ok {
		return true
	}
	timer := time.NewTimer(awaitMax)
	defer timer.Stop()
	for cc.done.Load() < c.Fast {
		cc.mu.Lock()
		ch := cc.progress
		cc.mu.Unlock()
		if cc.done.Load() >= c.Fast {
			break
		}
		select {
		case <-ch:
		case <-timer.C:
			fp.logf("conn %d: no response to a redirected request in %v: closing", cc.cookie, awaitMax)
			cc.Conn.Close()
			return false
		}
	}
	return true
}
