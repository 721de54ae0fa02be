package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Golden is the verdict file beside a fixture pcap (NAME.pcap ->
// NAME.golden.json): the configuration C to replay it under, which the
// program's own package defines (shield/datapath's FixtureConfig for the
// shield), then what the program did with every frame. A fixture test's
// -update rewrites Packets and Totals; Config is input and kept.
type Golden[C any] struct {
	Config  C                 `json:"config"`
	Packets []GoldenPacket    `json:"packets"`
	Totals  map[string]uint64 `json:"totals"`
}

// GoldenPacket is one frame's outcome. At is the pcap timestamp, which the
// replay uses as the virtual time; Summary is for readers only.
type GoldenPacket struct {
	N       int    `json:"n"`
	AtNs    int64  `json:"at_ns"`
	Summary string `json:"summary"`
	Verdict Action `json:"verdict"`
	Counter string `json:"counter"` // the one counter the frame moved
}

// ReadGolden reads a golden file whose configuration is a C.
func ReadGolden[C any](path string) (Golden[C], error) {
	var g Golden[C]
	b, err := os.ReadFile(path)
	if err != nil {
		return g, err
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return g, fmt.Errorf("parse %s: %w", path, err)
	}
	return g, nil
}

// WriteGolden writes g, indented, with a trailing newline.
func WriteGolden[C any](path string, g Golden[C]) error {
	b, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Summary describes a frame in one line as gopacket decodes it, e.g.
// "Ethernet/Dot1Q/Dot1Q/IPv6/UDP 2001:db8::1": which layers, and the source.
func Summary(frame []byte) string {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var names []string
	for _, l := range p.Layers() {
		if l.LayerType() == gopacket.LayerTypePayload {
			continue
		}
		names = append(names, l.LayerType().String())
	}
	s := strings.Join(names, "/")
	if n := p.NetworkLayer(); n != nil && len(n.NetworkFlow().Src().Raw()) > 0 {
		s += " " + n.NetworkFlow().Src().String()
	}
	return fmt.Sprintf("%s (%d bytes)", s, len(frame))
}
