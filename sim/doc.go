// Package sim drives XDP programs through BPF_PROG_TEST_RUN with frames built
// by gopacket: the simulator that proves a data plane without a network.
//
// It owns:
//   - Run: one frame through any XDP *ebpf.Program, Repeat 1 (stateful runs);
//   - Frame: builders for IPv4/IPv6 frames, untagged, 802.1Q tagged and
//     802.1ad+802.1Q double tagged, carrying TCP, UDP or ICMP;
//   - Scenario: table-driven steps (virtual time, frame, expected verdict,
//     expected counter deltas) against a Target (a program, and optionally
//     its virtual clock and its counters by name), that fail when zero steps
//     ran and write the frames of a failing scenario to a pcap for tcpdump
//     or Wireshark;
//   - pcap reading and writing, and Golden: a fixture pcap's verdict file,
//     generic over the configuration the program's package replays it under.
//
// It is generic: it drives any program of bpf/ and knows none of them
// (TestSimStaysGeneric fails when it, or anything it imports, imports the
// shield). A program's glue and data-plane tests live with the program:
// the shield's in shield/datapath (its scenarios, fixtures/sim goldens,
// benchmarks and fuzzing).
//
// A failing scenario writes its frames to $SIM_PCAP_DIR, or
// $TMPDIR/xdpshield-sim, and logs the path.
//
// It loads no program itself and writes no map (targets come loaded, from
// their own packages), attaches nothing and touches no network namespace.
package sim
