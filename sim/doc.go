// Package sim drives XDP programs through BPF_PROG_TEST_RUN with frames built
// by gopacket: the simulator that proves the data plane without a network.
//
// It owns:
//   - Run: one frame through any XDP *ebpf.Program, Repeat 1 (stateful runs);
//   - Frame: builders for IPv4/IPv6 frames, untagged, 802.1Q tagged and
//     802.1ad+802.1Q double tagged, carrying TCP, UDP or ICMP;
//   - Scenario: table-driven steps (virtual time, frame, expected verdict,
//     expected counter deltas) that fail when zero steps ran and write the
//     frames of a failing scenario to a pcap for tcpdump or Wireshark;
//   - fixtures: replaying fixtures/sim/*.pcap against their golden verdict
//     JSON (`go test ./sim -update` rewrites the goldens);
//   - the benchmarks of every path of the shield next to an XDP_DROP
//     reference program measured in the same run (`make bench`), reported
//     as ns/pkt and x-ref (the ratio to the reference);
//   - the tests that prove the shield's data plane: exact burst and refill
//     under virtual time, lists (allow beats deny at any prefix length),
//     IPv6 and VLAN sources, a malformed corpus, a forged flood, dry-run,
//     two-CPU accuracy (stated in bpf/shield.c, take()), FuzzShield, and
//     the holes of issue 9 (holes_test.go: clock switches, spoofed own and
//     IPv4-mapped sources, protected destinations, /64 source keys).
//
// Test data: fixtures/sim (XDPSHIELD_FIXTURES=<dir> points elsewhere). A
// failing scenario writes its frames to $SIM_PCAP_DIR, or
// $TMPDIR/xdpshield-sim, and logs the path.
//
// It loads programs only through xdpshield/bpf and xdpshield/shield, writes
// no map itself (configuration goes through the shield package), attaches
// nothing and touches no network namespace.
package sim
