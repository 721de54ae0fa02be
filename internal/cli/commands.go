package cli

import (
	"context"

	"github.com/xdpshield/xdpshield/shield/lists"
)

// Commands are the commands of this package, by name.
func Commands() map[string]Command {
	return map[string]Command{
		"status": {"show counters, table use, limits and list sizes (API)", runStatus},
		"top":    {"list the top talkers by dropped or passed packets (API)", runTop},
		"allow": {"allow add|del|list [CIDR...] [-f FILE]: the allow list (API)", func(ctx context.Context, e *Env, args []string) error {
			return runList(ctx, e, lists.AllowList, args)
		}},
		"deny": {"deny add|del|list [CIDR...] [-f FILE]: the deny list (API)", func(ctx context.Context, e *Env, args []string) error {
			return runList(ctx, e, lists.DenyList, args)
		}},
		"limits":  {"limits get | limits set [-rate N] [-burst N] [-admission-rate N] [-admission-burst N] [-dry-run=BOOL] [-protected LIST] [-unprotected-rate N ...] [-key-prefix6 N] (API)", runLimits},
		"lb":      {"lb list | lb add|drain|remove SERVICE BACKEND... | lb create|replace [flags] SERVICE BACKEND[@W]... | lb delete SERVICE | lb mode SERVICE MODE: the socket balancer's services (API)", runLB},
		"l7":      {"l7 [-json]: the L7 proxy, fast path, routes and rules with their counts | l7 get: the policy in force as an [l7] TOML section | l7 set -f FILE: replace the policy (API)", runL7},
		"xdplb":   {"xdplb [list] | xdplb apply FILE: the XDP balancer's VIPs, backends and counters (API)", runXDPLB},
		"capture": {"write a pcap of dropped frames, sampled and bounded (API)", runCapture},
		"health":  {"exit 0 while the service protects its interface, 1 when not or unreachable (API; a container's HEALTHCHECK)", runHealth},
		"probe":   {"time requests per flow on an interface with the tc probe (root); live histogram or -json", runProbe},
		"version": {"print the version, VCS revision and Go version (also --version)", runVersion},
	}
}
