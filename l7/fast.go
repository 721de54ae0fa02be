package l7

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/l7/internal/sock"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// Reason indexes the data plane's counters (enum reason of bpf/l7.c).
type Reason int

// The data plane's reasons, in the order of bpf/l7.c.
const (
	ReasonFast Reason = iota
	ReasonMiss
	ReasonDeny
	ReasonNoRoute
	ReasonBusy
	ReasonUnparsed
	ReasonPolicy
	ReasonSticky
	ReasonStickyMore
	ReasonResponse
	ReasonRedirectGone
	ReasonUnknown
	ReasonCRLF
	numReasons
)

var reasonNames = [...]string{"fast", "miss", "deny", "noroute", "busy", "unparsed", "policy",
	"sticky", "sticky_more", "response", "redirect_gone", "unknown", "crlf"}

func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// FastCounters are the data plane's counts: Reasons by Reason, Routes the
// fast requests of each route.
type FastCounters struct {
	Reasons [numReasons]uint64
	Routes  [policy.MaxRoutes]uint64
}

// Slow is the number of requests passed to the proxy (every reason but
// fast, response, unknown, crlf and sticky_more, which counts later data of a
// connection already passed).
func (c FastCounters) Slow() uint64 {
	var n uint64
	for r := Reason(0); r < numReasons; r++ {
		switch r {
		case ReasonFast, ReasonResponse, ReasonUnknown, ReasonStickyMore, ReasonCRLF:
		default:
			n += c.Reasons[r]
		}
	}
	return n
}

// FastPath is the loaded data plane attached to its sockhashes, serving one
// proxy's client connections.
type FastPath struct {
	objs   bpf.L7Objects
	px     *Proxy
	Lookup bool // the kernel lets programs look sockhash entries up
	// PassRedirect: messages for the proxy are redirected to the client
	// socket's own ingress rather than passed (SK_PASS): unless
	// Options.SKPass.
	PassRedirect bool
	// Relay: messages for the proxy are redirected to a relay socket per
	// client connection, which the proxy reads (relay.go): unless
	// Options.NoRelay, where the kernel takes unix sockets into a
	// sockhash, or else TCP sockets on loopback (RelayTCP).
	Relay bool
	// RelayTCP: the relays are TCP pairs on loopback (sock.TCPPairs),
	// on a kernel that takes no unix socket into a sockhash (5.10).
	RelayTCP bool
	// watchPoll: a relay's watcher never reads the client socket, it
	// waits for POLLRDHUP, and accept runs the parser on what the socket
	// queued before joining the sockhash (relay.go watch): with RelayTCP.
	watchPoll bool
	// noKick: accept leaves the parser to the next data's arrival
	// (Options.NoKick).
	noKick    bool
	tcpRelays *sock.TCPPairs
	Enabled   bool   // the policy is held in the kernel
	Why       string // why not, when !Enabled
	log       *slog.Logger
	links     []link.RawAttachProgramOptions
	reuse     *DataPlane // Options.Reuse: Close gives objs back to it
	gaveBack  bool       // and did

	mu    sync.Mutex
	conns map[uint64]*clientConn
	shut  bool // Close ran: the maps are closed
	// stray counts the bytes read off sockets in the sockhashes by
	// relays' watchers and pooled sockets' readers (the kernel passed them
	// up, not on; none where watchPoll).
	stray atomic.Uint64

	// A policy change (swap.go): polMu orders it against the writes of
	// connections' control (accept, idle); kp is the policy in the
	// kernel; grace's updates wait for running programs; the kernel's
	// fast counts by route index, kept by name across changes.
	polMu      sync.Mutex
	kp         bpf.L7Policy
	grace      *ebpf.Map
	graceInner *ebpf.Map
	routeBase  map[string]uint64
	routeOff   [policy.MaxRoutes]uint64
	dropped    atomic.Uint64 // pooled sockets dropped by policy changes
	// unjoined counts accepted connections the data plane could not take
	// (a map full or out of memory): the proxy alone served them.
	unjoined  atomic.Uint64
	responses atomic.Uint64 // responses to fast requests relayed (respond.go)
}

// kernelPolicy compiles p into the data plane's form; enabled false (with
// the reason) when the kernel cannot hold it (then every request passes).
func kernelPolicy(p *policy.Policy) (kp bpf.L7Policy, why string) {
	c := p.Config()
	name := strings.ToLower(c.HashHeader)
	for _, r := range c.RBAC {
		if r.Header == "" {
			continue
		}
		if name == "" {
			name = strings.ToLower(r.Header)
		} else if !strings.EqualFold(r.Header, name) {
			return kp, fmt.Sprintf("rules and hash name two headers (%q, %q): the kernel matches one", name, r.Header)
		}
	}
	kp.Enabled = 1
	kp.N_routes = uint32(len(p.Routes()))
	kp.N_rules = uint32(len(p.Rules()))
	if c.HashHeader != "" {
		kp.Hash = 1
	}
	if c.SetHeader.Name != "" {
		kp.SetHeader = 1
	}
	if len(name) > len(kp.NameW)*8 || strings.ContainsAny(name, "^~") {
		return bpf.L7Policy{}, fmt.Sprintf("header %q: the kernel compares names of at most %d bytes, without '^' or '~'", name, len(kp.NameW)*8)
	}
	kp.NameLen = uint32(len(name))
	kp.NameW, kp.NameM = packName(name)
	for i, rt := range p.Routes() {
		k := &kp.Routes[i]
		k.HostLen = uint32(len(rt.Host))
		copy(k.Host[:], rt.Host)
		k.PrefixLen = uint32(len(rt.PathPrefix))
		copy(k.Prefix[:], rt.PathPrefix)
	}
	for i, ru := range p.Rules() {
		k := &kp.Rules[i]
		k.PrefixLen = uint32(len(ru.PathPrefix))
		copy(k.Prefix[:], ru.PathPrefix)
		k.Methods = ru.Methods
		k.SrcBit = 0xff
		if ru.Source.IsValid() {
			k.SrcBit = uint32(i)
		}
		if ru.Header != "" {
			k.HasValue = 1
			k.ValueLen = uint32(len(ru.Value))
			copy(k.Value[:], ru.Value)
		}
		if ru.Deny {
			k.Deny = 1
		}
	}
	return kp, ""
}

// Attach loads the data plane as opt says, writes px's policy into it and
// makes px hand it every connection it accepts from then on
// (Proxy.Listener). On a kernel opt does not accept (opt.Kernels, by
// default those of KernelServes) it loads nothing, leaves px alone and
// returns an error wrapping ErrKernelRefused.
func Attach(px *Proxy, log *slog.Logger, opt Options) (_ *FastPath, err error) {
	if log == nil {
		log = slog.Default()
	}
	if ok, rel := opt.kernelServes(); !ok {
		return nil, fmt.Errorf("l7 fast path: %w (%v): kernel %s; the proxy alone serves", ErrKernelRefused, opt.kernels(), rel)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	fp := &FastPath{px: px, log: log, conns: map[uint64]*clientConn{}}
	fp.PassRedirect = !opt.SKPass
	fp.noKick = opt.NoKick
	if !opt.NoRelay {
		if uerr := sock.UnixIntoSockhash(); uerr == nil && !opt.TCPRelay {
			fp.Relay = true
		} else if tr, terr := sock.ListenTCPPairs(); terr == nil {
			log.Debug("l7: no unix relay sockets, relays are TCP pairs on loopback", "error", uerr)
			fp.Relay, fp.RelayTCP, fp.tcpRelays = true, true, tr
			fp.watchPoll = !opt.WatchRead
			defer func() {
				if err != nil {
					tr.Close()
				}
			}()
		} else {
			log.Debug("l7: no relay sockets, handing over to the client socket", "error", errors.Join(uerr, terr))
		}
	}
	if opt.Reuse != nil {
		err = opt.Reuse.take(fp, log)
	} else {
		fp.objs, fp.Lookup, err = loadObjs(log, fp.PassRedirect, fp.Relay)
	}
	if err != nil {
		return nil, err
	}
	p := px.Policy()
	kp, why := kernelPolicy(p)
	fp.Enabled, fp.Why = kp.Enabled == 1, why
	if err = fp.writePolicy(kp); err != nil {
		fp.closeObjs()
		return nil, err
	}
	if err = fp.writeRing(p); err != nil {
		fp.closeObjs()
		return nil, err
	}
	if fp.grace, fp.graceInner, err = newGrace(); err != nil {
		fp.closeObjs()
		return nil, err
	}
	for _, a := range []link.RawAttachProgramOptions{
		{Target: fp.objs.Clients.FD(), Program: fp.objs.L7Parse, Attach: ebpf.AttachSkSKBStreamParser},
		{Target: fp.objs.Clients.FD(), Program: fp.objs.L7Verdict, Attach: ebpf.AttachSkSKBStreamVerdict},
	} {
		if err = link.RawAttachProgram(a); err != nil {
			fp.Close()
			return nil, fmt.Errorf("attach %s to sockhash: %w", a.Program, err)
		}
		fp.links = append(fp.links, a)
	}
	px.fast = fp
	return fp, nil
}

// closeObjs unloads fp's objects (a failed Attach), or drops the
// DataPlane it was given.
func (fp *FastPath) closeObjs() {
	if fp.reuse != nil {
		if !fp.gaveBack {
			fp.reuse.giveBack(true)
			fp.gaveBack = true
		}
		return
	}
	fp.objs.Close()
}

// Close detaches and unloads the data plane (or, with Options.Reuse,
// empties its maps and gives it back); sockets in it keep working
// (the kernel removes them from the maps as the maps go), but a client
// connection read through a relay gets nothing more there: its relay is
// ended, so the proxy reads the end of it and closes the connection rather
// than waiting for good. Close the proxy's connections first (Server.Close
// does).
func (fp *FastPath) Close() error {
	var errs []error
	for _, a := range fp.links {
		errs = append(errs, link.RawDetachProgram(link.RawDetachProgramOptions{Target: a.Target, Program: a.Program, Attach: a.Attach}))
	}
	fp.links = nil
	// The maps close under fp.mu, with shut set: a connection the proxy
	// closes and a pooled socket's reader run after it, and leave them be.
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.shut = true
	for _, cc := range fp.conns {
		cc.mu.Lock()
		for _, u := range cc.pooled {
			u.Close()
		}
		cc.pooled = nil
		cc.closed = true
		cc.mu.Unlock()
		if cc.relay != nil {
			cc.relay.end()
		}
	}
	if fp.reuse != nil {
		// Once: a second Close must not touch what another may use now.
		if !fp.gaveBack {
			errs = append(errs, fp.reuse.giveBack(false))
			fp.gaveBack = true
		}
	} else {
		errs = append(errs, fp.objs.Close())
	}
	if fp.tcpRelays != nil {
		errs = append(errs, fp.tcpRelays.Close())
	}
	if fp.grace != nil {
		errs = append(errs, fp.grace.Close(), fp.graceInner.Close())
	}
	return errors.Join(errs...)
}

// Counters sums the per-CPU counters.
func (fp *FastPath) Counters() (FastCounters, error) {
	var c FastCounters
	var per []uint64
	for i := 0; i < int(numReasons)+policy.MaxRoutes; i++ {
		if err := fp.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return c, fmt.Errorf("read l7 counter %d: %w", i, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		if i == int(ReasonResponse) {
			sum += fp.responses.Load() // relayed in user space (respond.go)
		}
		if i < int(numReasons) {
			c.Reasons[i] = sum
		} else {
			c.Routes[i-int(numReasons)] = sum
		}
	}
	return c, nil
}

func (fp *FastPath) logf(format string, args ...any) {
	fp.log.Debug("l7: " + fmt.Sprintf(format, args...))
}

// addrPort is a's address and port.
func addrPort(a net.Addr) (netip.AddrPort, error) {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort(), nil
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return ap, fmt.Errorf("address %q: %w", a, err)
	}
	return ap, nil
}

// accept puts an accepted client connection into the data plane: its state,
// its source mask and the parser's scratch, then the sockhash (so the
// parser finds them).
func (fp *FastPath) accept(c net.Conn) (*clientConn, error) {
	cc := &clientConn{Conn: c, fp: fp, pooled: map[int]net.Conn{}, progress: make(chan struct{})}
	ap, err := addrPort(c.RemoteAddr())
	if err != nil {
		return nil, err
	}
	cc.src = ap.Addr()
	// A policy change rewrites every known connection's mask: this one is
	// known (fp.conns) before the next change starts.
	fp.polMu.Lock()
	defer fp.polMu.Unlock()
	mask := fp.px.Policy().SourceMask(cc.src)
	cc.mask.Store(mask)
	err = sock.Control(c, func(fd int, cookie uint64) error {
		cc.cookie = cookie
		if fp.Relay {
			rl, err := fp.newRelay(cookie)
			if err != nil {
				return err
			}
			cc.relay = rl
		}
		if err := fp.objs.Conns.Put(cookie, bpf.L7Conn{}); err != nil {
			return fmt.Errorf("put conn: %w", err)
		}
		if err := fp.objs.Ctls.Put(cookie, bpf.L7Ctl{SrcMask: mask}); err != nil {
			return fmt.Errorf("put ctl: %w", err)
		}
		if err := fp.objs.Scratch.Put(cookie, bpf.L7Scratch{}); err != nil {
			return fmt.Errorf("put parser scratch: %w", err)
		}
		if err := fp.objs.Clients.Put(cookie, uint32(fd)); err != nil {
			return fmt.Errorf("put client socket: %w", err)
		}
		if fp.watchPoll && !fp.noKick {
			if err := sock.KickParser(fd); err != nil {
				fp.objs.Clients.Delete(cookie)
				return err
			}
		}
		return nil
	})
	if err != nil {
		fp.objs.Conns.Delete(cc.cookie)
		fp.objs.Ctls.Delete(cc.cookie)
		fp.objs.Scratch.Delete(cc.cookie)
		if cc.relay != nil {
			cc.relay.close()
		}
		return nil, err
	}
	fp.mu.Lock()
	fp.conns[cc.cookie] = cc
	fp.mu.Unlock()
	if cc.relay != nil {
		go fp.watch(cc)
	}
	return cc, nil
}

// idle runs when the proxy has answered every request it read on cc: the
// pool gets a socket for each backend the proxy forwarded to (the lazy fill
// after a miss), then the kernel may redirect again (expected = handled).
func (fp *FastPath) idle(cc *clientConn) {
	cc.mu.Lock()
	wanted := cc.wanted
	cc.wanted = nil
	closed := cc.closed
	cc.mu.Unlock()
	if closed {
		return
	}
	for _, b := range wanted {
		if err := fp.fill(cc, b); err != nil {
			fp.logf("fill pool of %d for backend %d: %v", cc.cookie, b, err)
		}
	}
	fp.polMu.Lock()
	defer fp.polMu.Unlock()
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.shut {
		return
	}
	cc.expected.Store(cc.handled.Load())
	if err := fp.writeCtl(cc); err != nil {
		fp.logf("ctl of %d: %v", cc.cookie, err)
	}
}

// writeCtl writes cc's control as it stands: requests the proxy answered,
// responses relayed (respond.go), source mask. Every writer writes it
// whole, one at a time (cc.ctlMu), so none undoes another's field.
func (fp *FastPath) writeCtl(cc *clientConn) error {
	cc.ctlMu.Lock()
	defer cc.ctlMu.Unlock()
	return fp.objs.Ctls.Update(cc.cookie, bpf.L7Ctl{Expected: cc.expected.Load(), Done: cc.done.Load(),
		SrcMask: cc.mask.Load()}, ebpf.UpdateExist)
}

func (fp *FastPath) fill(cc *clientConn, b int) error {
	p := fp.px.Policy()
	if !p.Uses(b) {
		return nil // dropped by a policy change since the proxy forwarded to it
	}
	up, err := fp.px.dial(context.Background(), "tcp", p.Backend(b).String())
	if err != nil {
		return err
	}
	// The maps are written under fp.mu: Close may have run meanwhile.
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.shut {
		up.Close()
		return nil
	}
	var upCookie uint64
	err = sock.Control(up, func(fd int, cookie uint64) error {
		upCookie = cookie
		if err := fp.objs.Peer.Put(cookie, cc.cookie); err != nil {
			return fmt.Errorf("put peer: %w", err)
		}
		if err := fp.objs.Upstreams.Put(cookie, uint32(fd)); err != nil {
			return fmt.Errorf("put upstream socket: %w", err)
		}
		return nil
	})
	if err == nil {
		err = fp.objs.Pool.Put(bpf.L7PoolKey{Client: cc.cookie, Backend: uint32(b)}, upCookie)
	}
	if err != nil {
		fp.objs.Peer.Delete(upCookie)
		up.Close()
		return err
	}
	cc.mu.Lock()
	// A policy change swaps the proxy's policy before it drops pooled
	// sockets (under cc.mu): a backend dropped meanwhile is not pooled.
	if cc.closed || !fp.px.Policy().Uses(b) {
		cc.mu.Unlock()
		fp.objs.Pool.Delete(bpf.L7PoolKey{Client: cc.cookie, Backend: uint32(b)})
		fp.objs.Peer.Delete(upCookie)
		up.Close()
		return nil
	}
	cc.pooled[b] = up
	cc.mu.Unlock()
	cc.hasPool.Store(true)
	// Every response the backend sends is read here, framed and written
	// to the client in order (respond.go); the pool slot empties at the
	// backend's close.
	go fp.respond(cc, b, up, upCookie)
	return nil
}

// closed forgets cc and closes its pooled sockets.
func (fp *FastPath) closed(cc *clientConn) {
	cc.mu.Lock()
	cc.closed = true
	pooled := cc.pooled
	cc.pooled = map[int]net.Conn{}
	cc.mu.Unlock()
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for b, u := range pooled {
		if !fp.shut {
			fp.objs.Pool.Delete(bpf.L7PoolKey{Client: cc.cookie, Backend: uint32(b)})
		}
		u.Close()
	}
	if !fp.shut {
		fp.objs.Conns.Delete(cc.cookie)
		fp.objs.Ctls.Delete(cc.cookie)
		fp.objs.Scratch.Delete(cc.cookie)
	}
	delete(fp.conns, cc.cookie)
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// packName packs a header name as the data plane compares names (bpf/l7.c,
// NW): byte i, with bit 0x20 set, at bits 8*(i%8) of word i/8, and the
// masks of the name's bytes in each word.
func packName(s string) (w, m [4]uint64) {
	for i := 0; i < len(s) && i < 32; i++ {
		w[i/8] |= uint64(s[i]|0x20) << (8 * (i % 8))
		m[i/8] |= 0xff << (8 * (i % 8))
	}
	return w, m
}

// settled reports whether every client connection is back with the kernel:
// the proxy answered all the kernel passed it (tests wait on it).
func (fp *FastPath) settled() bool {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for cookie := range fp.conns {
		var c bpf.L7Conn
		var ctl bpf.L7Ctl
		if fp.objs.Conns.Lookup(cookie, &c) != nil || fp.objs.Ctls.Lookup(cookie, &ctl) != nil {
			continue
		}
		if c.Sticky == 0 && (c.Passed != ctl.Expected || c.Fast != ctl.Done) {
			return false
		}
	}
	return true
}
