package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/probe"
)

// raw is what the plots need beyond results.json: every fixed-phase
// keep-alive latency and the probe's summed histograms, per
// configuration. It goes to raw.json beside results.json, so a report can
// be drawn again (Load) without measuring again.
type raw struct {
	KeepAliveNs map[string][]int64          `json:"keep_alive_ns"`
	DatagramNs  map[string][]int64          `json:"datagram_ns,omitempty"`
	NewConnNs   map[string][]int64          `json:"new_conn_ns,omitempty"`
	Probe       map[string]*probe.Histogram `json:"probe"`
	ProbeKA     map[string]*probe.Histogram `json:"probe_keep_alive"`
}

func WriteRaw(dir string, r *Results) error {
	rw := raw{KeepAliveNs: map[string][]int64{}, DatagramNs: map[string][]int64{}, NewConnNs: map[string][]int64{},
		Probe: map[string]*probe.Histogram{}, ProbeKA: map[string]*probe.Histogram{}}
	ns := func(ds []time.Duration) []int64 {
		out := make([]int64, len(ds))
		for i, d := range ds {
			out[i] = int64(d)
		}
		return out
	}
	for _, l := range r.Legit {
		if l.Phase != PhaseFixed {
			continue
		}
		rw.KeepAliveNs[l.Config.Name] = ns(l.PooledKA)
		rw.DatagramNs[l.Config.Name] = ns(l.PooledDatagram)
		rw.NewConnNs[l.Config.Name] = ns(l.PooledNewConn)
		if l.ProbeHist != nil {
			rw.Probe[l.Config.Name] = l.ProbeHist
		}
		if l.ProbeKAHist != nil {
			rw.ProbeKA[l.Config.Name] = l.ProbeKAHist
		}
	}
	b, err := json.Marshal(rw)
	if err != nil {
		return fmt.Errorf("encode raw: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "raw.json"), b, 0o644)
}

// Load reads a study written to dir (results.json and raw.json) back, to
// draw its report and plots again.
func Load(dir string) (*Results, error) {
	var r Results
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode results: %w", err)
	}
	var rw raw
	if b, err = os.ReadFile(filepath.Join(dir, "raw.json")); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &rw); err != nil {
		return nil, fmt.Errorf("decode raw: %w", err)
	}
	for _, l := range r.Legit {
		if l.Phase != PhaseFixed {
			continue
		}
		for _, ns := range rw.KeepAliveNs[l.Config.Name] {
			l.PooledKA = append(l.PooledKA, time.Duration(ns))
		}
		for _, ns := range rw.DatagramNs[l.Config.Name] {
			l.PooledDatagram = append(l.PooledDatagram, time.Duration(ns))
		}
		for _, ns := range rw.NewConnNs[l.Config.Name] {
			l.PooledNewConn = append(l.PooledNewConn, time.Duration(ns))
		}
		if len(rw.DatagramNs) > 0 { // a raw.json written before the pooled tails: keep its figures
			l.pool()
		}
		l.ProbeHist = rw.Probe[l.Config.Name]
		l.ProbeKAHist = rw.ProbeKA[l.Config.Name]
	}
	r.Notes = slices.DeleteFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "plots not drawn") })
	return &r, nil
}
