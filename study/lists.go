package study

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/study/results"
)

// xdp-filter's pins (xdp-tools 1.3: fixed paths) and libxdp's directory.
const (
	xfPins   = "/sys/fs/bpf/xdp-filter"
	libxdpFS = "/sys/fs/bpf/xdp"
	// mapFlagSrc is xdp-filter's MAP_FLAG_SRC (xdp-filter/common_kern_user.h):
	// the value's low bits say which direction an entry matches.
	mapFlagSrc = 1
	xdpDrop    = 1 // XDP_DROP: its slot of xdp_stats_map
)

func (s *study) listSizes() []int {
	if s.opt.Quick {
		return results.ListSizes[:1]
	}
	return results.ListSizes
}

func (s *study) listSteps() int {
	return s.listRuns() * len(results.ListFamilies) * (1 + 2*len(s.listSizes()))
}

// listRuns: -quick makes one run of the list section (it checks that every
// target dropped, nothing more).
func (s *study) listRuns() int {
	if s.opt.Quick {
		return 1
	}
	return s.opt.Runs
}

// listAddrs are n distinct host addresses of family, the first
// min(n, MaxMany4) of them the many-forged storm's sources (the frames'
// sources); beyond them, entries no frame carries.
func listAddrs(family string, n int) []netip.Prefix {
	f := storm.Flow{First: storm.Many4, Count: uint32(n)}
	bits := 32
	if family == "ipv6" {
		f.First, bits = storm.Many6, 128
	}
	out := make([]netip.Prefix, n)
	for i := range out {
		out[i] = netip.PrefixFrom(f.Source(uint32(i)), bits)
	}
	return out
}

// listSection measures each list target's drop capacity and load time.
func (s *study) listSection(ctx context.Context) error {
	res := &results.ListResults{Sizes: s.listSizes()}
	s.res.Lists = res
	xf, xfErr := exec.LookPath("xdp-filter")
	switch {
	case xfErr != nil:
		res.Skipped = append(res.Skipped, "xdp-filter: not installed (ci/deps.sh installs xdp-tools)")
	default:
		if _, err := os.Stat(xfPins); err == nil {
			// Another xdp-filter is loaded on this machine: its pins
			// are global, so the study leaves it alone.
			res.Skipped = append(res.Skipped, "xdp-filter: "+xfPins+" exists (another xdp-filter is loaded on this machine): not touched")
			xf = ""
		} else {
			res.XDPFilter = "xdp-tools " + xfVersion()
		}
	}
	if xfErr != nil {
		xf = ""
	}
	_, statErr := os.Stat(libxdpFS)
	hadLibxdpDir := statErr == nil
	defer func() {
		if !hadLibxdpDir {
			os.Remove(libxdpFS) // only when empty: libxdp's, made by our load
		}
	}()
	res.CLIAddrs = 100
	if s.opt.Quick {
		res.CLIAddrs = 10
	}
	for run := range s.listRuns() {
		if xf != "" {
			secs, err := s.xfCLI(ctx, xf, res.CLIAddrs)
			if err != nil {
				return fmt.Errorf("xdp-filter ip: %w", err)
			}
			res.CLISec = append(res.CLISec, secs)
		}
		for _, fam := range results.ListFamilies {
			tpl, err := s.listTemplate(fam, 0)
			if err != nil {
				return err
			}
			s.bar.step(fmt.Sprintf("run %d/%d lists %s floor", run+1, s.listRuns(), fam))
			if err := s.listDrop(ctx, run, res.AddCell("floor", fam, 0), "floor", tpl, nil, ""); err != nil {
				return fmt.Errorf("lists floor %s: %w", fam, err)
			}
			for _, n := range res.Sizes {
				tpl, err := s.listTemplate(fam, n)
				if err != nil {
					return err
				}
				pre := listAddrs(fam, n)
				order := []string{"shield", "xdp-filter"}
				if run%2 == 1 {
					order[0], order[1] = order[1], order[0]
				}
				for _, t := range order {
					s.bar.step(fmt.Sprintf("run %d/%d lists %s %s %d", run+1, s.listRuns(), fam, t, n))
					if t == "xdp-filter" && xf == "" {
						continue
					}
					if err := s.listDrop(ctx, run, res.AddCell(t, fam, n), t, tpl, pre, xf); err != nil {
						return fmt.Errorf("lists %s %s %d: %w", t, fam, n, err)
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
		}
	}
	return nil
}

// listTemplate is UDP from the first min(n, MaxMany4) listed sources (n 0:
// as many as the 1,000 list).
func (s *study) listTemplate(fam string, n int) (storm.Template, error) {
	if n == 0 {
		n = results.ListSizes[0]
	}
	f := storm.Flow{Proto: storm.UDP, First: storm.Many4, Count: uint32(min(n, storm.MaxMany4))}
	if fam == "ipv6" {
		f.First = storm.Many6
	}
	return s.template(f)
}

// xfCLI times `xdp-filter ip` once per address for n addresses, as an
// operator adds them, on a load of its own, unloaded after.
func (s *study) xfCLI(ctx context.Context, xf string, n int) (float64, error) {
	if err := s.xfRun(ctx, xf, "load", storm.EdgeDev, "-f", "ipv4,ipv6", "-p", "allow", "-m", "native"); err != nil {
		return 0, err
	}
	defer s.xfUnload(ctx, xf)
	start := time.Now()
	for i := range n {
		// Entries no frame carries: 198.18.255.0/24.
		a := netip.AddrFrom4([4]byte{198, 18, 255, byte(i)})
		if err := s.xfRun(ctx, xf, "ip", a.String(), "-m", "src"); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds(), nil
}

// xfRun runs xdp-filter in the edge namespace: its network namespace only
// (nsenter), so its pins land in the machine's /sys/fs/bpf, where its
// next call finds them (`ip netns exec` would mount a /sys of its own).
func (s *study) xfRun(ctx context.Context, xf string, args ...string) error {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + s.top.Edge.Name, xf}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("xdp-filter %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (s *study) xfUnload(ctx context.Context, xf string) {
	if err := s.xfRun(context.WithoutCancel(ctx), xf, "unload", storm.EdgeDev); err != nil {
		s.log.Warn("unload xdp-filter", logErr, err)
	}
	if _, err := os.Stat(filepath.Join(xfPins, "programs", storm.EdgeDev)); err == nil {
		s.log.Warn("xdp-filter left its pins", "dir", xfPins)
	}
}

// xfWrite writes pre into xdp-filter's pinned map of the family, as a
// program would (one update per entry, every CPU's value MAP_FLAG_SRC);
// it returns how many it wrote and the error that stopped it.
func xfWrite(fam string, pre []netip.Prefix) (int, error) {
	name := "filter_ipv4"
	if fam == "ipv6" {
		name = "filter_ipv6"
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(xfPins, name), nil)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, err
	}
	val := make([]uint64, ncpu)
	for i := range val {
		val[i] = mapFlagSrc
	}
	for i, p := range pre {
		var err error
		if fam == "ipv4" {
			k := p.Addr().As4()
			err = m.Update(k, val, ebpf.UpdateAny)
		} else {
			k := p.Addr().As16()
			err = m.Update(k, val, ebpf.UpdateAny)
		}
		if err != nil {
			if errors.Is(err, unix.E2BIG) {
				return i, fmt.Errorf("its map holds %d addresses: entry %d of %d refused", m.MaxEntries(), i+1, len(pre))
			}
			return i, fmt.Errorf("entry %d of %d: %w", i+1, len(pre), err)
		}
	}
	return len(pre), nil
}

// xfDrops reads xdp-filter's XDP_DROP count (xdp_stats_map, per CPU).
func xfDrops() (uint64, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(xfPins, "xdp_stats_map"), nil)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	var recs [][]byte
	if err := m.Lookup(uint32(xdpDrop), &recs); err != nil {
		return 0, err
	}
	var n uint64
	for _, r := range recs {
		if len(r) >= 8 {
			n += binary.LittleEndian.Uint64(r)
		}
	}
	return n, nil
}

// listDrop loads target with list pre (timing the load), then measures its
// drop capacity from tpl at full speed for DropPhase.
func (s *study) listDrop(ctx context.Context, run int, c *results.ListCell, target string, tpl storm.Template, pre []netip.Prefix, xf string) error {
	var count func() (uint64, error)
	switch target {
	case "floor":
		prog, err := sim.DropProgram()
		if err != nil {
			return err
		}
		defer prog.Close()
		var l link.Link
		if err := s.top.Edge.Do(func() (err error) {
			l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: s.top.EdgeIfindex})
			return err
		}); err != nil {
			return err
		}
		defer l.Close()
	case "shield":
		sh, err := shield.Load(shield.Options{TableSize: shield.DefaultTableSize, Limits: results.Limits()})
		if err != nil {
			return err
		}
		defer sh.Close()
		start := time.Now()
		if _, err := sh.Add(lists.DenyList, pre); err != nil {
			c.Refused = err.Error()
			return nil
		}
		c.Load = append(c.Load, time.Since(start).Seconds())
		var l link.Link
		if err := s.top.Edge.Do(func() (err error) {
			l, err = link.AttachXDP(link.XDPOptions{Program: sh.Program(), Interface: s.top.EdgeIfindex})
			return err
		}); err != nil {
			return err
		}
		defer l.Close()
		count = func() (uint64, error) {
			cs, err := sh.Counters()
			return cs.Verdict(counter.Drop), err
		}
	case "xdp-filter":
		if err := s.xfRun(ctx, xf, "load", storm.EdgeDev, "-f", "ipv4,ipv6", "-p", "allow", "-m", "native"); err != nil {
			return err
		}
		defer s.xfUnload(ctx, xf)
		start := time.Now()
		held, err := xfWrite(c.Family, pre)
		if err != nil {
			c.Refused, c.Held = err.Error(), held
			return nil
		}
		c.Load = append(c.Load, time.Since(start).Seconds())
		count = xfDrops
	default:
		return fmt.Errorf("unknown list target %q", target)
	}
	var d0 uint64
	if count != nil {
		var err error
		if d0, err = count(); err != nil {
			return err
		}
	}
	phase := s.opt.DropPhase
	if s.opt.Quick {
		phase /= 2
	}
	d, _, err := s.dropPhase(ctx, run, []storm.Template{tpl}, nil, phase, s.edge.CPU)
	if err != nil {
		return err
	}
	if count == nil {
		d.Dropped = d.Seen
	} else {
		d1, err := count()
		if err != nil {
			return err
		}
		d.Dropped = d1 - d0
	}
	d.Rates()
	c.Samples = append(c.Samples, d)
	return nil
}

// xfVersion is the installed xdp-tools package's version (xdp-filter
// 1.3 prints none of its own).
func xfVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "xdp-tools").Output()
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(string(out))
}
