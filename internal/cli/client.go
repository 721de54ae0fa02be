package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/api/client"
	svc "github.com/xdpshield/xdpshield/service"
)

// Environment the API commands read when their flags are not given.
const (
	EnvAPI         = "SHIELD_API"
	EnvToken       = "SHIELD_TOKEN"
	EnvTokenFile   = "SHIELD_TOKEN_FILE"
	EnvCAFile      = "SHIELD_CA_FILE"
	EnvAdminSocket = "SHIELD_ADMIN_SOCKET"
	EnvAdminDir    = "SHIELD_ADMIN_DIR"
)

// clientFlags are the flags every API command takes.
type clientFlags struct {
	api       string
	tokenFile string
	caFile    string
	adminSock string
	json      bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.api, "api", "", "service URL (default $"+EnvAPI+" or http://"+api.DefaultListen+")")
	fs.StringVar(&c.tokenFile, "token-file", "", "operator token file, for changes (default $"+EnvTokenFile+", or the token in $"+EnvToken+")")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM certificates to trust for an https:// -api (default $"+EnvCAFile+", else the system's)")
	fs.StringVar(&c.adminSock, "admin-socket", "", "the service's admin socket (default $"+EnvAdminSocket+", else the one of a loopback -api in $"+
		EnvAdminDir+" or "+svc.DefaultAdminDir+")")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
}

// client builds the API client; the token is only needed for changes.
func (c *clientFlags) client(needToken bool) (*client.Client, error) {
	base := c.api
	if base == "" {
		base = os.Getenv(EnvAPI)
	}
	if base == "" {
		base = "http://" + api.DefaultListen
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if err := plainOnlyToLoopback(base); err != nil {
		return nil, err
	}
	cl := &client.Client{Base: base, Operator: operator()}
	// A local service is reached through its admin socket, checked to be
	// root's (or this user's) before anything is sent: any local user may
	// bind a loopback TCP port (issue 23, finding 4).
	sock, err := c.adminSocket(base)
	if err != nil {
		return nil, err
	}
	if sock != "" {
		cl.Base = "http://shield-admin"
		cl.HTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return svc.DialAdmin(ctx, sock) }}}
	}
	ca := c.caFile
	if ca == "" {
		ca = os.Getenv(EnvCAFile)
	}
	if ca != "" && sock == "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no PEM certificate in %s", ca)
		}
		cl.HTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	tf := c.tokenFile
	if tf == "" {
		tf = os.Getenv(EnvTokenFile)
	}
	switch {
	case tf != "":
		tok, err := readTokenFile(tf)
		if err != nil {
			return nil, err
		}
		cl.Token = tok
	case os.Getenv(EnvToken) != "":
		cl.Token = strings.TrimSpace(os.Getenv(EnvToken))
	case needToken:
		return nil, fmt.Errorf("changes need the operator token: -token-file, $%s or $%s", EnvTokenFile, EnvToken)
	}
	return cl, nil
}

// operator names the person making changes: user@host (the user sudo ran as).
func operator() string {
	name := os.Getenv("SUDO_USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// plainOnlyToLoopback refuses an http:// URL whose host is not a loopback
// address: the token and the answers would cross a network in clear
// (issue 23, finding 9). https:// is verified against the CA.
func plainOnlyToLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("-api %q: %w", base, err)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
	default:
		return fmt.Errorf("-api %q: want http:// (loopback) or https://", base)
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("-api %s: plain http:// to %q, which is not a loopback address, would send the token and the answers in clear; use https:// (api.tls_cert) and -ca-file", base, host)
}

// adminSocket is the admin socket the client goes through: -admin-socket
// or $SHIELD_ADMIN_SOCKET, else for an http:// loopback -api the socket of
// its port in this network namespace; "" for https://.
func (c *clientFlags) adminSocket(base string) (string, error) {
	if c.adminSock != "" {
		return c.adminSock, nil
	}
	if p := os.Getenv(EnvAdminSocket); p != "" {
		return p, nil
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return "", nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	dir := os.Getenv(EnvAdminDir)
	if dir == "" {
		dir = svc.DefaultAdminDir
	}
	// Its port names the socket; the loopback address was checked.
	return svc.AdminSocket(dir, net.JoinHostPort("127.0.0.1", port))
}
