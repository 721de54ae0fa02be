package datapath

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

var update = flag.Bool("update", false, "rewrite fixtures/sim: pcaps from their definitions, goldens from the program's verdicts")

// fixtureDir is fixtures/sim of the repository; XDPSHIELD_FIXTURES points a
// test binary run elsewhere (a VM) at a copy.
var fixtureDir = func() string {
	if d := os.Getenv("XDPSHIELD_FIXTURES"); d != "" {
		return filepath.Join(d, "sim")
	}
	return "../../fixtures/sim"
}()

// fixtureDefs generate the fixture pcaps (with -update). Each frame's
// capture time is the virtual time it is replayed at.
var fixtureDefs = []struct {
	name   string
	config FixtureConfig
	frames func() []sim.Packet
}{
	{
		name:   "burst-refill",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 10, Burst: 5, AdmissionRate: 100, AdmissionBurst: 100}},
		frames: func() []sim.Packet {
			f := sim.From("198.18.0.1", sim.UDP).Bytes()
			var out []sim.Packet
			for range 7 {
				out = append(out, sim.Packet{At: time.Second, Data: f})
			}
			for _, at := range []time.Duration{1100*time.Millisecond - 1, 1100 * time.Millisecond, 1100 * time.Millisecond, 1250 * time.Millisecond, 10 * time.Second} {
				out = append(out, sim.Packet{At: at, Data: f})
			}
			for range 6 {
				out = append(out, sim.Packet{At: 10 * time.Second, Data: f})
			}
			return out
		},
	},
	{
		name: "lists",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 100, AdmissionBurst: 100},
			Allow: []string{"198.18.1.0/24", "2001:db8:1::/48"}, Deny: []string{"198.18.0.0/15", "2001:db8::/32"}},
		frames: func() []sim.Packet {
			var out []sim.Packet
			for _, f := range []sim.Frame{
				sim.From("198.18.1.1", sim.TCP), sim.From("198.18.1.1", sim.TCP), sim.From("198.18.1.1", sim.TCP),
				sim.From("2001:db8:1::1", sim.UDP, sim.Single...), sim.From("198.19.0.1", sim.UDP), sim.From("2001:db8:2::1", sim.ICMP, sim.Double...),
				sim.From("203.0.113.9", sim.TCP), sim.From("203.0.113.9", sim.TCP), sim.From("203.0.113.9", sim.TCP),
			} {
				out = append(out, sim.Packet{At: time.Second, Data: f.Bytes()})
			}
			return out
		},
	},
	{
		name: "families-and-tags",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 100, AdmissionBurst: 100,
			KeyPrefix6: 128}}, // one source per address, as the frames were made
		frames: func() []sim.Packet {
			var out []sim.Packet
			n := 0
			for _, src := range []string{"198.18.2.%d", "2001:db8:2::%d"} {
				for _, tags := range [][]sim.Tag{nil, sim.Single, sim.Double} {
					for _, l4 := range []sim.L4{sim.TCP, sim.UDP, sim.ICMP} {
						n++
						f := sim.From(fmt.Sprintf(src, n), l4, tags...).Bytes()
						for range 3 {
							out = append(out, sim.Packet{At: time.Second, Data: f})
						}
					}
				}
			}
			return out
		},
	},
	{
		name:   "malformed",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1}, Deny: []string{"0.0.0.0/0", "::/0"}},
		frames: func() []sim.Packet {
			var out []sim.Packet
			for i, b := range badCorpus() {
				if i%7 == 0 { // a sample: the test covers every frame
					out = append(out, sim.Packet{At: time.Second, Data: b.frame})
				}
			}
			return out
		},
	},
	{
		name:   "forged-flood",
		config: FixtureConfig{TableSize: 64, Limits: config.Limits{Rate: 100, Burst: 10, AdmissionRate: 10, AdmissionBurst: 5}},
		frames: func() []sim.Packet {
			heavy := sim.From("198.18.0.1", sim.UDP).Bytes()
			out := []sim.Packet{{At: time.Second, Data: heavy}}
			for i := range 640 {
				at := time.Second + time.Duration(i)*time.Millisecond
				a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
				out = append(out, sim.Packet{At: at, Data: sim.From(a.String(), sim.TCP).Bytes()})
				if i%16 == 0 {
					out = append(out, sim.Packet{At: at, Data: heavy})
				}
			}
			return out
		},
	},
	{
		// Issue 23: per source, three SYNs to tcp/443 (burst 2: the
		// third is limited) plain, behind Destination Options, as an
		// atomic fragment, to tcp/22 and ICMPv6 echo; then return
		// traffic (an ACK and a port unreachable to ephemeral ports),
		// three each, all passed as unprotected.
		name: "ipv6-extensions-and-return",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 100, AdmissionBurst: 100,
			Protected: config.DefaultLimits().Protected}},
		frames: func() []sim.Packet {
			var out []sim.Packet
			dst := netip.MustParseAddr("2001:db8:ffff::fffe")
			for i, f := range []sim.Frame{
				{L4: sim.TCP, DstPort: 443},
				{L4: sim.TCP, DstPort: 443, Ext: []sim.Ext{destOpts8}},
				{L4: sim.TCP, DstPort: 443, Ext: []sim.Ext{atomic}},
				{L4: sim.TCP, DstPort: 443, Ext: rfc8200Order},
				{L4: sim.TCP, DstPort: 22},
				{L4: sim.ICMP},
				{L4: sim.TCP, DstPort: 40000, Seg: sim.ACK, SrcPort: 443},
				{L4: sim.Unreachable, DstPort: 40000, SrcPort: 53},
			} {
				f.Src, f.Dst = netip.MustParseAddr(fmt.Sprintf("2001:db8:23:%x::1", i+1)), dst
				for range 3 {
					out = append(out, sim.Packet{At: time.Second, Data: f.Bytes()})
				}
			}
			return out
		},
	},
	{
		name:   "dry-run",
		config: FixtureConfig{TableSize: 4096, Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 1, DryRun: true}, Deny: []string{"198.18.9.0/24"}},
		frames: func() []sim.Packet {
			var out []sim.Packet
			for _, f := range []sim.Frame{
				sim.From("198.18.0.1", sim.UDP), sim.From("198.18.0.1", sim.UDP), sim.From("198.18.0.1", sim.UDP), sim.From("198.18.0.1", sim.UDP),
				sim.From("198.18.0.2", sim.TCP), sim.From("198.18.9.1", sim.UDP),
			} {
				out = append(out, sim.Packet{At: time.Second, Data: f.Bytes()})
			}
			return out
		},
	},
}

// loadFixture loads a shield configured as c, virtual clock at 0.
func loadFixture(t *testing.T, c FixtureConfig) *shield.Shield {
	t.Helper()
	s := load(t, c.TableSize, c.Limits)
	if len(c.Allow) > 0 {
		addList(t, s, lists.AllowList, c.Allow...)
	}
	if len(c.Deny) > 0 {
		addList(t, s, lists.DenyList, c.Deny...)
	}
	return s
}

// TestFixtures replays every fixtures/sim/*.pcap through a shield set up as
// its golden says and compares every verdict and counter with the golden.
// With -update it first rewrites the pcaps of fixtureDefs and then every
// golden from what the program does.
func TestFixtures(t *testing.T) {
	testutil.Root(t)
	if *update {
		require.NoError(t, os.MkdirAll(fixtureDir, 0o755))
		for _, d := range fixtureDefs {
			require.NoError(t, sim.WritePcap(filepath.Join(fixtureDir, d.name+".pcap"), d.frames()))
			path := filepath.Join(fixtureDir, d.name+".golden.json")
			g, err := sim.ReadGolden[FixtureConfig](path)
			if err != nil && !os.IsNotExist(err) {
				require.NoError(t, err)
			}
			g.Config = d.config
			require.NoError(t, sim.WriteGolden(path, g))
		}
	}
	pcaps, err := filepath.Glob(filepath.Join(fixtureDir, "*.pcap"))
	require.NoError(t, err)
	require.NotEmpty(t, pcaps, "no fixtures in %s", fixtureDir)
	for _, d := range fixtureDefs {
		require.Contains(t, pcaps, filepath.Join(fixtureDir, d.name+".pcap"), "fixture %q is defined but its pcap is missing (go test ./shield/datapath -update)", d.name)
	}
	for _, path := range pcaps {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		t.Run(name, func(t *testing.T) {
			goldenPath := strings.TrimSuffix(path, ".pcap") + ".golden.json"
			g, err := sim.ReadGolden[FixtureConfig](goldenPath)
			require.NoError(t, err, "every fixture pcap needs a golden with its config")
			frames, err := sim.ReadPcap(path)
			require.NoError(t, err)
			require.NotEmpty(t, frames, "ReadPcap(%s)", path)
			s := loadFixture(t, g.Config)
			target := Target(s)

			if *update {
				g.Packets = nil
				start, err := target.Counters()
				require.NoError(t, err)
				for i, f := range frames {
					before, err := target.Counters()
					require.NoError(t, err)
					require.NoError(t, s.SetTime(uint64(f.At)))
					got, err := sim.Run(s.Program(), f.Data)
					require.NoError(t, err, "frame %d", i)
					after, err := target.Counters()
					require.NoError(t, err)
					d := sim.Delta(before, after)
					require.Len(t, d, 1, "frame %d moved %v, want exactly one counter", i, d)
					var key string
					for k := range d {
						key = k
					}
					g.Packets = append(g.Packets, sim.GoldenPacket{N: i, AtNs: int64(f.At), Summary: sim.Summary(f.Data), Verdict: got, Counter: key})
				}
				end, err := target.Counters()
				require.NoError(t, err)
				g.Totals = sim.Delta(start, end)
				require.NoError(t, sim.WriteGolden(goldenPath, g))
				t.Logf("rewrote %s", goldenPath)
				return
			}

			require.Len(t, g.Packets, len(frames), "%s: golden packets vs pcap frames", name)
			steps := make([]sim.Step, len(frames))
			for i, f := range frames {
				gp := g.Packets[i]
				require.Equal(t, int64(f.At), gp.AtNs, "frame %d: pcap time vs golden", i)
				steps[i] = sim.Step{Name: fmt.Sprintf("frame %d: %s", i, gp.Summary), At: f.At, Frame: f.Data, Want: gp.Verdict, Delta: map[string]uint64{gp.Counter: 1}}
			}
			before, err := target.Counters()
			require.NoError(t, err)
			sim.Scenario{Name: "fixture-" + name, Target: target, Steps: steps}.Run(t)
			after, err := target.Counters()
			require.NoError(t, err)
			assert.Equal(t, g.Totals, sim.Delta(before, after), "%s: counter totals", name)
		})
	}
}

// TestFixturesReadByTcpdump: tcpdump reads every fixture pcap whole.
func TestFixturesReadByTcpdump(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		testutil.SkipOrFail(t, "tcpdump not installed (ci/deps.sh installs it)")
	}
	pcaps, err := filepath.Glob(filepath.Join(fixtureDir, "*.pcap"))
	require.NoError(t, err)
	require.NotEmpty(t, pcaps)
	for _, path := range pcaps {
		frames, err := sim.ReadPcap(path)
		require.NoError(t, err)
		out, err := exec.Command(tcpdump, "-nner", path).CombinedOutput()
		require.NoError(t, err, "tcpdump -nner %s:\n%s", path, out)
		lines := 0
		for _, l := range strings.Split(string(out), "\n") {
			if len(l) > 0 && l[0] >= '0' && l[0] <= '9' { // a packet line starts with its timestamp
				lines++
			}
		}
		assert.Equal(t, len(frames), lines, "packets tcpdump printed for %s", path)
	}
}
