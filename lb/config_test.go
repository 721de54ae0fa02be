package lb

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestConfig(t *testing.T) {
	const good = `
cgroup = "edge"
reverse_size = 4096
[[service]]
vip = "198.18.1.1"
port = 80
mode = "maglev"
backends = ["198.18.2.1:8080", "198.18.2.2:8080"]
[[service]]
vip = "2001:db8:1::1"
port = 53
protocol = "udp"
backends = ["[2001:db8:2::1]:53"]
`
	var c Config
	if _, err := toml.Decode(good, &c); err != nil {
		t.Fatal(err)
	}
	svcs, err := c.Services()
	if err != nil {
		t.Fatalf("Services() error = %v, want none", err)
	}
	if len(svcs) != 2 || svcs[0].Mode != Maglev || svcs[1].Proto != UDP || svcs[1].Mode != Random || len(svcs[0].Backends) != 2 {
		t.Errorf("Services() = %+v, want the two services as written (defaults: random)", svcs)
	}

	for _, tc := range []struct {
		name, entry, want string
	}{
		{"bad VIP", `vip = "198.18.1.300"
port = 80
backends = ["198.18.2.1:80"]`, `lb.service[0]: vip: ParseAddr("198.18.1.300")`},
		{"bad port", `vip = "198.18.1.1"
port = 70000
backends = ["198.18.2.1:80"]`, "lb.service[0]: port: 70000 out of range"},
		{"zero backends", `vip = "198.18.1.1"
port = 80`, "lb.service[0]: service tcp/198.18.1.1:80: zero backends"},
		{"bad backend", `vip = "198.18.1.1"
port = 80
backends = ["198.18.2.1"]`, `backend "198.18.2.1"`},
		{"duplicate backend", `vip = "198.18.1.1"
port = 80
backends = ["198.18.2.1:80", "198.18.2.1:80"]`, "duplicate backend 198.18.2.1:80"},
		{"VIP is a backend", `vip = "198.18.2.1"
port = 80
backends = ["198.18.2.1:8080"]`, "VIP 198.18.2.1 is a backend address of service tcp/198.18.2.1:80"},
		{"unknown mode", `vip = "198.18.1.1"
port = 80
mode = "rr"
backends = ["198.18.2.1:80"]`, `unknown mode "rr"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			if _, err := toml.Decode("[[service]]\n"+tc.entry, &c); err != nil {
				t.Fatal(err)
			}
			_, err := c.Services()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Services() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
