// Package datapath proves the shield's data plane in the simulator (sim):
// the shield's glue to the generic simulator, and the tests that load the
// XDP program and run frames through it.
//
// It owns:
//   - Target: a loaded *shield.Shield as a sim.Target (program, counters by
//     Key "verdict/reason/proto", virtual clock), and One and N, the counter
//     deltas scenarios expect;
//   - FixtureConfig: the configuration a fixtures/sim pcap replays under
//     (the Config of its sim.Golden);
//   - the tests: exact burst and refill under virtual time, real clocks'
//     rates, lists (allow beats deny at any prefix length), IPv6 and VLAN
//     sources, a malformed corpus, a forged flood, dry-run, two-CPU accuracy
//     (stated in bpf/shield.c, take()), FuzzShield, the holes of issue 9
//     (holes_test.go), and the fixtures' goldens (`go test ./shield/datapath
//     -update` rewrites fixtures/sim: pcaps from their definitions, goldens
//     from the program's verdicts);
//   - the benchmarks of every path of the shield next to an XDP_DROP
//     reference program measured in the same run (`make bench`), reported
//     as ns/pkt and x-ref (the ratio to the reference), and the forged flood.
//
// `-datapath.compat` loads shield_compat in shield's place on every kernel
// (the regression gate's second behaviour run). Test data: fixtures/sim
// (XDPSHIELD_FIXTURES=<dir> points elsewhere).
//
// It loads the program only through package shield and configures it
// only through it (BenchmarkForgedFlood alone fills the sources table
// directly, testutil.FillSources through shield.Table, to measure a full
// table); it attaches nothing and touches no network namespace.
package datapath
