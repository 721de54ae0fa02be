package parts

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// NewCertificate makes a self-signed ECDSA P-256 certificate for addrs,
// valid for a day, and the pool a client needs to trust it.
func NewCertificate(addrs ...netip.Addr) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "xdpshield e2e edge"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("parse certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// EdgeServer is the HTTPS server of the edge namespace.
type EdgeServer struct {
	srv  *http.Server
	Pool *x509.CertPool // what a client must trust
}

// StartEdgeServer listens on EdgePort of every address inside ns (one
// dual-stack socket, so the SYN flood and the client share its queues) and
// serves a tiny page over TLS with a certificate for addrs made now.
func StartEdgeServer(ns *topo.NS, addrs ...netip.Addr) (*EdgeServer, error) {
	cert, pool, err := NewCertificate(addrs...)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", storm.EdgePort))
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on port %d in %s: %w", storm.EdgePort, ns.Name, err)
	}
	s := ServeEdge(ln, cert)
	s.Pool = pool
	return s, nil
}

// ServeEdge serves the edge's page over TLS with cert on ln (a listener
// already in the edge's namespace): the study runs it in a process of its
// own, to measure the edge's CPU time apart from the client's.
func ServeEdge(ln net.Listener, cert tls.Certificate) *EdgeServer {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "edge ok")
	})
	s := &EdgeServer{
		srv: &http.Server{
			Handler:           mux,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			ReadHeaderTimeout: 5 * time.Second,
			// Handshakes cut short when the client stops are expected:
			// debug level, not the storm's output.
			ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelDebug),
		},
	}
	go func() {
		if err := s.srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("edge server", logErr, err)
		}
	}()
	return s
}

// Close stops the server.
func (s *EdgeServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
