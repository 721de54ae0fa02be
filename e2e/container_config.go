package e2e

import (
	"bytes"
	"fmt"

	"github.com/BurntSushi/toml"

	"github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield/config"
)

// ContainerShieldConfig is the service's configuration file for cfg: the storm's
// interface, mode, clock, table, limits and lists, the API on loopback
// behind the token (reads included), the default pin root
// /sys/fs/bpf/xdpshield. It is encoded, not written by hand, with the
// service's own Limits type, so no field of cfg is left behind.
func ContainerShieldConfig(cfg service.Config) string {
	type api struct {
		Listen    string `toml:"listen"`
		TokenFile string `toml:"token_file"`
		AuthReads bool   `toml:"auth_reads"`
	}
	type lists struct {
		OwnAddressesSpoofed bool     `toml:"own_addresses_spoofed"`
		Allow               []string `toml:"allow"`
		Deny                []string `toml:"deny"`
	}
	file := struct {
		Iface     string        `toml:"iface"`
		Mode      string        `toml:"mode"`
		Clock     string        `toml:"clock"`
		TableSize uint32        `toml:"table_size"`
		API       api           `toml:"api"`
		Limits    config.Limits `toml:"limits"`
		Lists     lists         `toml:"lists"`
	}{
		Iface: cfg.Iface, Mode: cfg.Mode.String(), Clock: cfg.Clock.String(), TableSize: cfg.TableSize,
		API:    api{Listen: ContainerAPI, TokenFile: "/etc/xdpshield/token", AuthReads: true},
		Limits: cfg.Limits,
		Lists:  lists{OwnAddressesSpoofed: cfg.SpoofOwnAddresses, Allow: []string{}, Deny: []string{}},
	}
	for _, p := range cfg.Allow {
		file.Lists.Allow = append(file.Lists.Allow, p.String())
	}
	for _, p := range cfg.Deny {
		file.Lists.Deny = append(file.Lists.Deny, p.String())
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(file); err != nil {
		panic(fmt.Sprintf("encode the shield's configuration: %v", err)) // strings, integers and bools only
	}
	return b.String()
}

// ContainerAPI is where the container lane's shield (e2e/container, a
// module of its own) serves its API, inside the edge's namespace.
const ContainerAPI = "127.0.0.1:9470"
