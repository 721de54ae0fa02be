package parts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// Kind is how the legitimate client reaches the edge.
type Kind uint8

const (
	NewConn   Kind = iota // a TCP and TLS handshake per request
	KeepAlive             // requests on one open connection
	Datagram              // a UDP request to the datagram service, resent when unanswered
	NumKinds              // how many kinds there are
)

func (k Kind) String() string { return [...]string{"new_conn", "keep_alive", "udp"}[k] }

// Recorder collects the legitimate client's results for the phase in
// progress; between phases (Switch(nil)) results are discarded.
type Recorder struct {
	mu  sync.Mutex
	cur *Samples
}

// Samples are one phase's request results.
type Samples struct {
	Start, End time.Time
	Lat        [NumKinds][]time.Duration // successful requests
	Fail       [NumKinds]int
	Errors     map[string]int // a few failure messages, by text
}

// Switch starts collecting into a fresh Samples (or stops, with nil-able
// start false) and returns the Samples just finished.
func (r *Recorder) Switch(start bool) *Samples {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.cur
	if prev != nil {
		prev.End = time.Now()
	}
	r.cur = nil
	if start {
		r.cur = &Samples{Start: time.Now(), Errors: map[string]int{}}
	}
	return prev
}

func (r *Recorder) add(k Kind, began time.Time, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.cur
	if s == nil || began.Before(s.Start) {
		return // between phases, or begun in the previous one
	}
	if err != nil {
		s.Fail[k]++
		if len(s.Errors) < 8 {
			s.Errors[err.Error()]++
		}
		return
	}
	s.Lat[k] = append(s.Lat[k], d)
}

// Quantile returns the q-quantile (nearest rank) of d, which it sorts.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*q+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// ClientConfig is the legitimate client's pace.
type ClientConfig struct {
	NewConnRate   float64       `json:"new_conn_rate"`   // new-connection requests per second, per family
	KeepAliveRate float64       `json:"keep_alive_rate"` // keep-alive requests per second, per family
	Timeout       time.Duration `json:"timeout_ns"`      // per HTTPS request; a slower answer is a failure
	UDPRate       float64       `json:"udp_rate"`        // datagram service requests per second, per family
	UDPAttempt    time.Duration `json:"udp_attempt_ns"`  // how long a datagram request waits before it is sent again
	UDPAttempts   int           `json:"udp_attempts"`    // sends of one datagram request before it fails
}

// DefaultClientConfig keeps one source well under the shield's default
// limit of 1000 packets/s: a TLS request on a new connection costs the
// client about 8 packets, one on a kept-alive connection about 2, so
// 25 + 100 requests/s per family is about 400 packets/s per source. 50 new
// connections a second make 400 samples in an 8 s phase, so the p99 is the
// 4th slowest rather than the slowest. The datagram service is asked 25
// times a second per family, a request resent after 200 ms up to 3 times,
// as a stub resolver would: a request fails only if the service drops three
// in a row, more than the short overload a storm's first burst causes (its
// sources each pass their burst at once) lasts.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{NewConnRate: 25, KeepAliveRate: 100, Timeout: 2 * time.Second,
		UDPRate: 25, UDPAttempt: 200 * time.Millisecond, UDPAttempts: 3}
}

// Rate is how many requests of kind k a second the client makes per family.
func (c ClientConfig) Rate(k Kind) float64 {
	return [...]float64{c.NewConnRate, c.KeepAliveRate, c.UDPRate}[k]
}

// Client is the legitimate client: it runs in the storm namespace from its
// own addresses (Client4, Client6) and asks the edge server for a page.
type Client struct {
	cfg    ClientConfig
	rec    *Recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Dialer dials from inside ns: the socket is created on a thread that has
// entered the namespace, and stays there.
func Dialer(ns *topo.NS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// StartClient starts one new-connection and one keep-alive loop per family
// against targets, recording into rec.
func StartClient(ns *topo.NS, pool *x509.CertPool, cfg ClientConfig, rec *Recorder, targets ...netip.Addr) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, rec: rec, cancel: cancel}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} // no session cache: every new connection is a full handshake
	for _, dst := range targets {
		url := fmt.Sprintf("https://%s/", netip.AddrPortFrom(dst, storm.EdgePort))
		for _, k := range []Kind{NewConn, KeepAlive} {
			tr := &http.Transport{
				DialContext:         Dialer(ns),
				TLSClientConfig:     tlsCfg,
				DisableKeepAlives:   k == NewConn,
				MaxIdleConnsPerHost: 1,
				ForceAttemptHTTP2:   false,
			}
			hc := &http.Client{Transport: tr, Timeout: cfg.Timeout}
			rate := cfg.NewConnRate
			if k == KeepAlive {
				rate = cfg.KeepAliveRate
			}
			if rate <= 0 {
				continue
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer tr.CloseIdleConnections()
				c.loop(ctx, hc, url, k, time.Duration(float64(time.Second)/rate))
			}()
		}
		if cfg.UDPRate > 0 {
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.datagramLoop(ctx, ns, dst, cfg.UDPRate)
			}()
		}
	}
	return c
}

func (c *Client) loop(ctx context.Context, hc *http.Client, url string, k Kind, every time.Duration) {
	next := time.Now()
	for ctx.Err() == nil {
		began := time.Now()
		err := get(ctx, hc, url)
		if ctx.Err() != nil {
			return // cancelled mid-request: not a failure of the edge
		}
		c.rec.add(k, began, time.Since(began), err)
		next = next.Add(every)
		if now := time.Now(); next.Before(now) {
			next = now // late: go on at once, no catch-up burst
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
}

func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// Stop ends the loops and waits for them.
func (c *Client) Stop() {
	c.cancel()
	c.wg.Wait()
}

// peek returns the p50 and p99 of each kind so far in the phase, with the
// request and failure counts.
func (r *Recorder) peek() (p50, p99 [NumKinds]time.Duration, reqs, fails int) {
	r.mu.Lock()
	s := r.cur
	var lat [NumKinds][]time.Duration
	if s != nil {
		for k := range lat {
			lat[k] = slices.Clone(s.Lat[k])
			reqs += len(s.Lat[k]) + s.Fail[k]
			fails += s.Fail[k]
		}
	}
	r.mu.Unlock()
	for k := range lat {
		p50[k] = Quantile(lat[k], 0.5)
		p99[k] = Quantile(lat[k], 0.99)
	}
	return p50, p99, reqs, fails
}
