package results

// Sections of the study, selected with Options.Only (shieldlab study -only).
const (
	SectionMain  = "main"  // legitimate traffic and drop capacity against nftables, and the benchmarks
	SectionPeers = "peers" // the L7 fast path beside the Go proxy, HAProxy and nginx
	SectionLists = "lists" // large deny lists: the shield beside xdp-filter and the XDP_DROP floor
	SectionXDPLB = "xdplb" // the XDP layer-4 balancer's packet rate beside the XDP_DROP and XDP_TX floors
)

// Sections are every section, in the order of a run.
var Sections = []string{SectionMain, SectionPeers, SectionLists, SectionXDPLB}

// Config is one way the edge is set up for legitimate traffic.
type Config struct {
	Name    string `json:"name"`
	Program string `json:"program"` // none, shield, dryrun, allowall, nft
	Storm   bool   `json:"storm"`   // a few-source storm at StormRate throughout
	Probe   bool   `json:"probe"`   // the tc probe on the client link
}

// Configs are the configurations measured, in the order of a run.
var Configs = []Config{
	{"none", "none", false, false},
	{"shield-dryrun", "dryrun", false, false},
	{"shield-allowall", "allowall", false, false},
	{"shield", "shield", false, false},
	{"nft", "nft", false, false},
	{"probe", "none", false, true},
	{"shield+probe", "shield", false, true},
	{"none/storm", "none", true, false},
	{"shield/storm", "shield", true, false},
	{"nft/storm", "nft", true, false},
	{"shield+probe/storm", "shield", true, true},
}

// Phases of a configuration.
const (
	PhaseFixed      = "fixed"      // the e2e client's default pace
	PhaseSaturation = "saturation" // keep-alive requests back to back
)

// Drop-capacity targets. shield-nopass is the shield with a source limit
// that passes almost nothing (1 packet/s, burst 1; strangers admitted as by
// default): the same drop paths as the shield's, without the stack's work
// on what the default limits let through, which on two shared cores slows
// the generator.
//
// generator is the generator alone: no program on the storm link's edge
// end and GRO off there, so the veth runs no NAPI and refuses every frame
// at once. Its rate is the generator's own, the ceiling of every other
// figure: a floor close to it is set by the generator, not the receiver
// (GeneratorBound).
var DropTargets = []string{"generator", "floor", "shield", "shield-nopass", "nft"}

// Drop-capacity source sets.
var DropSources = []string{"few", "many"}

// KeepAliveFlow is the least number of requests the probe must have timed
// on a flow to count it as one of the client's kept-alive connections
// (which make 100 a second; a new connection makes 3 or 4).
const KeepAliveFlow = 20

// BenchRow is one line of the simulator's benchmark table.
type BenchRow struct {
	Name  string  `json:"name"`
	NsPkt float64 `json:"ns_per_packet"`
	XRef  float64 `json:"x_xdp_drop"`
}

// UDPCapacity is the datagram service's capacity. The storm demo's
// service answers 15,000/s, over what its storm of 4 few sources passes
// at the per-source limit. The study's storm has 32 sources (16 per
// family), and storm.Run sends each 10 ms tick's UDP first, so nearly all
// a source passes is UDP: up to 32,000/s at the old default of 1,000/s
// each (10,700 were it a third). 10,000 is under what per-source limits
// let through at any rate the legitimate client can live with (it sends
// about 350 packets/s from its address): the case the aggregate limit is
// for (issue 26), and the study derives its limits for it (Derive).
const UDPCapacity = 10_000
