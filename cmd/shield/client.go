package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"xdpshield/shield/api"
)

// Environment the API commands read when their flags are not given.
const (
	envAPI       = "SHIELD_API"
	envToken     = "SHIELD_TOKEN"
	envTokenFile = "SHIELD_TOKEN_FILE"
	envCAFile    = "SHIELD_CA_FILE"
)

// stdout is where the API commands print (tests capture it).
var stdout io.Writer = os.Stdout

// clientFlags are the flags every API command takes.
type clientFlags struct {
	api       string
	tokenFile string
	caFile    string
	json      bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.api, "api", "", "service URL (default $"+envAPI+" or http://"+api.DefaultListen+")")
	fs.StringVar(&c.tokenFile, "token-file", "", "operator token file, for changes (default $"+envTokenFile+", or the token in $"+envToken+")")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM certificates to trust for an https:// -api (default $"+envCAFile+", else the system's)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
}

// client builds the API client; the token is only needed for changes.
func (c *clientFlags) client(needToken bool) (*api.Client, error) {
	base := c.api
	if base == "" {
		base = os.Getenv(envAPI)
	}
	if base == "" {
		base = "http://" + api.DefaultListen
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	cl := &api.Client{Base: base, Operator: operator()}
	ca := c.caFile
	if ca == "" {
		ca = os.Getenv(envCAFile)
	}
	if ca != "" {
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
		tf = os.Getenv(envTokenFile)
	}
	switch {
	case tf != "":
		tok, err := readTokenFile(tf)
		if err != nil {
			return nil, err
		}
		cl.Token = tok
	case os.Getenv(envToken) != "":
		cl.Token = strings.TrimSpace(os.Getenv(envToken))
	case needToken:
		return nil, fmt.Errorf("changes need the operator token: -token-file, $%s or $%s", envTokenFile, envToken)
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

func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// helpOK turns -h (flag.ErrHelp, usage already printed) into a clean exit.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
