package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The documented example must stay a valid, complete configuration: every
// key it shows decodes, and it validates once given a token file.
func TestExampleConfig(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "docs", "shield.example.toml"))
	if err != nil {
		t.Fatalf("loadConfig(example) = %v", err)
	}
	if _, err := c.validate(); err != nil {
		t.Fatalf("example config invalid: %v", err)
	}
	def := defaultConfig()
	def.Iface = c.Iface
	if c.API != def.API || c.Limits != def.Limits || c.Log != def.Log || c.Mode != def.Mode ||
		c.TableSize != def.TableSize || c.PinRoot != def.PinRoot || c.Clock != def.Clock ||
		c.Lists.AllowOwnAddresses != def.Lists.AllowOwnAddresses {
		t.Errorf("example config differs from the defaults it documents:\n got %+v\nwant %+v", c, def)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, []byte("0123456789abcdef0123\n"), 0o644)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	cases := []struct {
		name, body, want string
	}{
		{"ok", `iface = "eth0"` + "\n[api]\ntoken_file = \"" + tok + "\"", ""},
		{"unknown key", "iface = \"eth0\"\ncolour = 1", "unknown keys: colour"},
		{"unknown nested key", "iface = \"eth0\"\n[limits]\nrte = 5", "unknown keys: limits.rte"},
		{"no iface", "", "iface: an interface is required"},
		{"rate 0", "iface = \"eth0\"\n[limits]\nrate = 0", "rate 0 out of range"},
		{"table 0", "iface = \"eth0\"\ntable_size = 0", "table_size: 0 out of range [1024, 16777216]"},
		{"table absurd", "iface = \"eth0\"\ntable_size = 5000000000", "table_size: 5000000000 out of range"},
		// Issue 10, finding 7: negative values as written, not 2^64-N.
		{"negative", "iface = \"eth0\"\n[limits]\nburst = -1", "limits.burst = -1"},
		{"negative table", "iface = \"eth0\"\ntable_size = -5", "table_size = -5"},
		// Issue 10, findings 6 and 7: the listen address is checked by
		// -check, and an exposed API needs protection.
		{"listen not a host", "iface = \"eth0\"\n[api]\nlisten = \"not-a-host:9470\"", `api.listen "not-a-host:9470"`},
		{"listen no port", "iface = \"eth0\"\n[api]\nlisten = \"127.0.0.1\"", `api.listen "127.0.0.1"`},
		{"exposed", "iface = \"eth0\"\n[api]\nlisten = \"0.0.0.0:9470\"", "beyond loopback"},
		{"exposed with token and auth_reads, no TLS", "iface = \"eth0\"\n[api]\nlisten = \"198.18.0.1:9470\"\nauth_reads = true\ntoken_file = \"" + tok + "\"", "TLS (api.tls_cert"},
		{"exposed, dangerously", "iface = \"eth0\"\n[api]\nlisten = \"0.0.0.0:9470\"\ndangerously_expose = true", ""},
		{"tls cert alone", "iface = \"eth0\"\n[api]\ntls_cert = \"/nonexistent\"", "give both or neither"},
		{"bad cidr", "iface = \"eth0\"\n[lists]\ndeny = [\"198.18.0.0/24\", \"198.18.0.999\"]", `lists.deny: "198.18.0.999"`},
		{"bad mode", "iface = \"eth0\"\nmode = \"fast\"", `unknown mode "fast"`},
		{"bad duration", "iface = \"eth0\"\n[api]\ntop_timeout = \"soon\"", "top_timeout"},
		{"loose token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + loose + "\"", "mode 0644: others may read it"},
		{"short token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + short + "\"", "shorter than 16"},
		{"missing token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + dir + "/none\"", "open token file"},
		{"syntax", "iface = ", "config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml")
			os.WriteFile(p, []byte(tc.body), 0o600)
			c, err := loadConfig(p)
			if err == nil {
				_, err = c.validate()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("config %q: %v, want no error", tc.body, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("config %q: %v, want an error with %q", tc.body, err, tc.want)
			}
		})
	}
}

// TestTokenFileFIFODoesNotBlock (issue 10, finding 7): a FIFO as token file
// held serve in open(), deaf to SIGTERM. It must be refused at once.
func TestTokenFileFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readTokenFile(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("readTokenFile(fifo) = %v, want a not-a-regular-file error", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("readTokenFile(fifo) still blocked after 2 s")
	}
}
