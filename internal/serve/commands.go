package serve

import (
	"github.com/xdpshield/xdpshield/internal/cli"
)

// Commands are the commands of this package, by name.
func Commands() map[string]cli.Command {
	return map[string]cli.Command{
		"serve":  {Summary: "attach the shield to an interface and serve its API", Run: runServe},
		"nft":    {Summary: "print (or -apply) the nftables ruleset equivalent to a serve configuration", Run: runNft},
		"detach": {Summary: "remove the shield and the balancer from an interface, with their pins (stop serve first)", Run: runDetach},
	}
}
