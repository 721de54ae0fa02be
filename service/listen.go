package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Bounds of the API's connections.
const (
	// MaxConns bounds the API's open connections; past it, new ones wait
	// in the kernel's backlog until one closes.
	MaxConns = 64
	// PerPeer bounds the connections one peer holds: one user on this
	// machine (loopback TCP or the admin socket, told apart by the
	// socket's credentials), else one address (one /64 for IPv6). A
	// peer's connection past it is closed at once.
	PerPeer = 8
	// Reserved of the MaxConns slots are held back for authenticated
	// requests: past MaxConns-Reserved connections without the token, a
	// new connection must carry the token on its first request or it is
	// answered 503 and closed.
	Reserved = 16
	// HeadTimeout bounds the reading of a request's head, counted from
	// the connection's start for its first request: a connection that
	// says nothing does not hold its slot longer.
	HeadTimeout = 5 * time.Second
	// WriteTimeout bounds the writing of one answer beyond the handler's
	// own time: a client that does not read its answer is cut off.
	WriteTimeout = 30 * time.Second
)

// httpServer is the API's HTTP server: headers, requests and idle
// connections bounded in size and time, and an answer cut off when its
// client has not taken it within write.
func httpServer(h http.Handler, write time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: HeadTimeout, ReadTimeout: 30 * time.Second,
		WriteTimeout: write, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if gc, ok := c.(*guardConn); ok {
				return context.WithValue(ctx, guardConnKey{}, gc)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

// ValidateAPI checks the API's configuration whole, before anything is
// bound or attached: the address must be IP:PORT, and an address beyond
// loopback needs reads behind the token and TLS, unless DangerouslyExpose
// says otherwise.
func ValidateAPI(a API) error {
	var errs []error
	ap, err := netip.ParseAddrPort(a.Listen)
	if err != nil {
		errs = append(errs, fmt.Errorf("api.listen %q: want IP:PORT with a literal address (127.0.0.1:9470, [::1]:9470)", a.Listen))
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		errs = append(errs, errors.New("api.tls_cert and api.tls_key: give both or neither"))
	}
	if a.TLSCert != "" && a.TLSKey != "" {
		if _, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey); err != nil {
			errs = append(errs, fmt.Errorf("api.tls_cert/api.tls_key: %w", err))
		}
	}
	if err == nil && !ap.Addr().Unmap().IsLoopback() && !a.DangerouslyExpose {
		var missing []string
		if a.Token == "" {
			missing = append(missing, "an operator token (api.token_file)")
		}
		if !a.AuthReads {
			missing = append(missing, "reads behind the token (api.auth_reads = true)")
		}
		if a.TLSCert == "" {
			missing = append(missing, "TLS (api.tls_cert, api.tls_key)")
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("api.listen %s is beyond loopback and lacks %v; "+
				"or set api.dangerously_expose = true to serve it unprotected", a.Listen, missing))
		}
	}
	return errors.Join(errs...)
}

// exposed reports whether the API is reachable beyond loopback without
// every protection (allowed only by DangerouslyExpose).
func exposed(a API) bool {
	ap, err := netip.ParseAddrPort(a.Listen)
	return err == nil && !ap.Addr().Unmap().IsLoopback() && (a.Token == "" || !a.AuthReads || a.TLSCert == "")
}

// listen binds the API's address in exactly the family it names (Go would
// make 0.0.0.0 a dual-stack socket, reachable on [::] too), guarded
// (MaxConns, PerPeer, Reserved), under TLS when configured.
func listen(a API, log *slog.Logger) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(a.Listen)
	if err != nil {
		return nil, err
	}
	network := "tcp6"
	if ap.Addr().Unmap().Is4() {
		network = "tcp4"
	}
	ln, err := net.Listen(network, a.Listen)
	if err != nil {
		return nil, err
	}
	ln = newGuard(ln, log)
	if a.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("load TLS key pair: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	return ln, nil
}
