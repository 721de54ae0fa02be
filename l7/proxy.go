package l7

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// Dialer dials a backend; tests pass one that dials inside a namespace.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Proxy is the Go reverse proxy enforcing a Policy: the slow path of the
// fast path and, alone, the baseline it is measured against.
type Proxy struct {
	cur  atomic.Pointer[proxyState] // the policy in force and its counters
	dial Dialer
	rp   *httputil.ReverseProxy
	fast *FastPath // nil: the proxy alone

	noRoute atomic.Uint64
	// Counters by route and by rule name, kept across policy changes
	// for the names the new policy keeps (swap).
	mu      sync.Mutex
	byRoute map[string]*routeCounters
	byRule  map[string]*atomic.Uint64
}

// proxyState is one policy and its counters: a request is judged and
// counted by the one state it loaded, so a change (swap) never splits a
// request between two policies.
type proxyState struct {
	p      *policy.Policy
	routes []*routeCounters // per route of p
	denied []*atomic.Uint64 // per rule of p
}

type routeCounters struct {
	requests atomic.Uint64
	class    [6]atomic.Uint64 // status / 100
}

// RouteCounters are one route's counts of requests the proxy forwarded and
// of their response codes by class (Class[2] counts 2xx).
type RouteCounters struct {
	Requests uint64
	Class    [6]uint64
}

// ProxyCounters are what the proxy itself answered or forwarded.
type ProxyCounters struct {
	Routes  []RouteCounters
	Denied  []uint64 // per RBAC rule
	NoRoute uint64
}

type ctxKey struct{}

// NewProxy returns a proxy enforcing p, dialing backends with dial (nil: the
// default dialer).
func NewProxy(p *policy.Policy, dial Dialer) *Proxy {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	px := &Proxy{dial: dial, byRoute: map[string]*routeCounters{}, byRule: map[string]*atomic.Uint64{}}
	px.swap(p)
	tr := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	px.rp = &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			j := pr.In.Context().Value(verdictKey{}).(judged)
			pr.SetURL(&url.URL{Scheme: "http", Host: j.st.p.Backend(j.v.Backend).String()})
			pr.Out.Host = pr.In.Host
			if strings.HasPrefix(j.path, "/") {
				// The path judged, byte for byte: Opaque is sent as it
				// is (URL.RequestURI), the query after it unchanged.
				pr.Out.URL.Opaque = j.path
				pr.Out.URL.RawPath = ""
				pr.Out.URL.Path, _ = url.PathUnescape(j.path)
			}
			if h := j.st.p.Config().SetHeader; h.Name != "" {
				pr.Out.Header.Set(h.Name, h.Value)
			}
		},
		ModifyResponse: func(r *http.Response) error {
			j := r.Request.Context().Value(verdictKey{}).(judged)
			j.st.routes[j.v.Route].class[min(r.StatusCode/100, 5)].Add(1)
			// A miss fills the pool with one socket to the backend it
			// went to (issue 24, finding 7: before, one to every backend
			// of the route), unless the backend closes its connections
			// after each response: one connection per request at most.
			if cc, _ := r.Request.Context().Value(ctxKey{}).(*clientConn); cc != nil && !r.Close {
				cc.want(j.v.Backend)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			j := r.Context().Value(verdictKey{}).(judged)
			j.st.routes[j.v.Route].class[5].Add(1)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return px
}

// swap makes p the proxy's policy at once: requests read before judge by
// the old one, requests read after by p. Counters follow names: a route
// or rule p keeps (by name) keeps its counts, one it drops loses them.
func (px *Proxy) swap(p *policy.Policy) (old *policy.Policy) {
	px.mu.Lock()
	defer px.mu.Unlock()
	st := &proxyState{p: p}
	routes := map[string]*routeCounters{}
	for _, rt := range p.Routes() {
		c := px.byRoute[rt.Name]
		if c == nil {
			c = &routeCounters{}
		}
		routes[rt.Name] = c
		st.routes = append(st.routes, c)
	}
	rules := map[string]*atomic.Uint64{}
	for i, ru := range p.Rules() {
		n := policy.RuleName(ru.Rule, i)
		c := px.byRule[n]
		if c == nil {
			c = &atomic.Uint64{}
		}
		rules[n] = c
		st.denied = append(st.denied, c)
	}
	px.byRoute, px.byRule = routes, rules
	if prev := px.cur.Swap(st); prev != nil {
		return prev.p
	}
	return nil
}

// Policy is the policy in force.
func (px *Proxy) Policy() *policy.Policy { return px.cur.Load().p }

// judged is a request's verdict and the state that gave it.
type judged struct {
	v    policy.Verdict
	st   *proxyState
	path string // the path judged: the backend receives it
}

type verdictKey struct{}

// ServeHTTP enforces the policy on one request.
func (px *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := px.cur.Load()
	cc, _ := r.Context().Value(ctxKey{}).(*clientConn)
	if cc != nil {
		cc.handled.Add(1)
	}
	req, err := policy.RequestOf(r)
	if err != nil {
		http.Error(w, "Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}
	v := st.p.Decide(req)
	switch {
	case v.Deny:
		st.denied[v.Rule].Add(1)
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	case v.NoRoute:
		px.noRoute.Add(1)
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	st.routes[v.Route].requests.Add(1)
	px.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verdictKey{}, judged{v, st, req.Path})))
}

// Counters returns the proxy's own counts, by route and rule of the policy
// in force.
func (px *Proxy) Counters() ProxyCounters {
	_, c := px.counters()
	return c
}

// counters returns the policy in force and its counts, read together.
func (px *Proxy) counters() (*policy.Policy, ProxyCounters) {
	st := px.cur.Load()
	c := ProxyCounters{NoRoute: px.noRoute.Load(), Denied: make([]uint64, len(st.denied)),
		Routes: make([]RouteCounters, len(st.routes))}
	for i := range st.denied {
		c.Denied[i] = st.denied[i].Load()
	}
	for i := range st.routes {
		c.Routes[i].Requests = st.routes[i].requests.Load()
		for k := range c.Routes[i].Class {
			c.Routes[i].Class[k] = st.routes[i].class[k].Load()
		}
	}
	return st.p, c
}

// Server returns the http.Server serving the proxy; with a fast path
// attached (Attach), Serve must be given Listener(l) so each accepted client
// socket joins the data plane before its first read.
func (px *Proxy) Server() *http.Server {
	s := &http.Server{Handler: px, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if px.fast != nil {
		s.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if cc, ok := c.(*clientConn); ok {
				return context.WithValue(ctx, ctxKey{}, cc)
			}
			return ctx
		}
		s.ConnState = func(c net.Conn, st http.ConnState) {
			cc, ok := c.(*clientConn)
			if !ok {
				return
			}
			switch st {
			case http.StateIdle:
				px.fast.idle(cc)
			case http.StateClosed, http.StateHijacked:
				px.fast.closed(cc)
			}
		}
	}
	return s
}

// Listener wraps l so each accepted connection joins the data plane (a
// no-op without a fast path).
func (px *Proxy) Listener(l net.Listener) net.Listener {
	if px.fast == nil {
		return l
	}
	return &fastListener{Listener: l, fp: px.fast}
}

// Serve serves l until it is closed.
func (px *Proxy) Serve(s *http.Server, l net.Listener) error {
	err := s.Serve(px.Listener(l))
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// clientConn is an accepted client connection known to the data plane.
type clientConn struct {
	net.Conn
	fp      *FastPath
	cookie  uint64
	src     netip.Addr    // the client's address
	mask    atomic.Uint32 // source mask of the policy in force (written under FastPath.polMu)
	handled atomic.Uint64 // requests the proxy read on it
	// Order (respond.go): expected is the proxy's answered count last
	// given to the kernel, done the responses to redirected requests
	// relayed; ctlMu orders the writes of the kernel's ctl; wmu the
	// writes to the client socket; progress is closed (and replaced,
	// under mu) at each response relayed; hasPool: a pooled socket was
	// ever made (before, no request was redirected).
	expected atomic.Uint64
	done     atomic.Uint64
	ctlMu    sync.Mutex
	wmu      sync.Mutex
	progress chan struct{}
	hasPool  atomic.Bool
	read     atomic.Uint64 // bytes the proxy read from it
	stray    atomic.Uint64 // bytes the relay's watcher read off the client socket itself (relay.go watch)

	relay *relay // where the kernel hands messages over, when FastPath.Relay (relay.go)

	mu     sync.Mutex
	wanted []int // backends the proxy forwarded to and that have no pooled socket yet
	pooled map[int]net.Conn
	closed bool
}

// Read counts what the proxy reads (against the kernel's passed_bytes).
func (cc *clientConn) Read(p []byte) (int, error) {
	n, err := cc.reader().Read(p)
	cc.read.Add(uint64(n))
	return n, err
}

func (cc *clientConn) want(b int) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if _, ok := cc.pooled[b]; ok {
		return
	}
	for _, w := range cc.wanted {
		if w == b {
			return
		}
	}
	cc.wanted = append(cc.wanted, b)
}

type fastListener struct {
	net.Listener
	fp *FastPath
}

func (l *fastListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc, err := l.fp.accept(c)
	if err != nil {
		// The proxy alone serves it: nothing of the data plane saw it.
		// Counted (shield_l7_fast_path_unjoined_total); said at the 1st,
		// 2nd, 4th, 8th... time, so a full table cannot flood the log.
		if n := l.fp.unjoined.Add(1); n&(n-1) == 0 {
			l.fp.log.Warn("l7: the fast path could not take a connection, the proxy alone serves it", "error", err, "connections", n)
		}
		return c, nil
	}
	return cc, nil
}
