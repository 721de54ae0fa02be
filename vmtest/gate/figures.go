package gate

// Figures are what the gate collects on one kernel.
type Figures struct {
	Kernel  string `json:"kernel"`  // lock name, or "host"
	Release string `json:"release"` // uname -r
	// Emulated: measured on a CPU emulated by qemu's TCG, where speed
	// differs from one boot to the next far more than within one.
	Emulated bool `json:"emulated,omitempty"`
	// Programs are the verifier's figures, by program name.
	Programs map[string]Program `json:"programs"`
	// Speed is per path of a program, by path name: the shield's under
	// their own names, the balancer's as xdplb/... (speedPaths).
	Speed map[string]Path `json:"speed"`
	// Behaviour is per test run: "package shield/datapath" (shield, the
	// loader's choice), "package shield/datapath -datapath.compat"
	// (shield_compat everywhere), "package sim", ...
	Behaviour map[string]Behaviour `json:"behaviour"`
	// Features are the lab's probed kernel features (internal/features):
	// name to "" when present, else the errno the probe met.
	Features map[string]string `json:"features,omitempty"`
	// Notes say what was measured otherwise than usual, for the report.
	Notes []string `json:"notes,omitempty"`
	// Errors are collection failures (a run that produced no figures).
	Errors []string `json:"errors,omitempty"`
}

// Program is one program's verifier figures on one kernel.
type Program struct {
	Loaded bool   `json:"loaded"`
	Error  string `json:"error,omitempty"` // the verifier's last lines, when refused
	// InsnsProcessed is the verifier's count of instructions processed:
	// from the program info (5.16+) or its log's stats line before.
	InsnsProcessed uint32 `json:"insns_processed"`
	InsnsSource    string `json:"insns_source"` // "info" or "log"
	// XlatedInsns is the program's size after the kernel's rewrites, in
	// instructions (8 bytes each); SpecInsns is the size as compiled.
	XlatedInsns int `json:"xlated_insns"`
	SpecInsns   int `json:"spec_insns"`
}

// Path is one path of a program timed against the XDP_DROP reference.
type Path struct {
	// NsPerPkt and RefNsPerPkt are the kernel's run-time statistics per
	// packet (run_time_ns / run_cnt), medians of the rounds.
	NsPerPkt    float64 `json:"ns_per_pkt"`
	RefNsPerPkt float64 `json:"ref_ns_per_pkt"`
	// TestRunNsPerPkt and TestRunRefNsPerPkt are BPF_PROG_TEST_RUN's own
	// figures (whole ns per run, the loop's bookkeeping included: what
	// `make bench` reports), for reading; the gate compares Ratio.
	TestRunNsPerPkt    float64 `json:"test_run_ns_per_pkt"`
	TestRunRefNsPerPkt float64 `json:"test_run_ref_ns_per_pkt"`
	Ratio              float64 `json:"ratio"` // median of the rounds' path/reference
	// VsBase is the median of the rounds' ns/packet of this tree's program
	// over the base revision's, timed in alternating turns in the same
	// rounds (0: no base timed); BaseNsPerPkt is the base's figure and
	// VsBaseSpread the rounds' (max - min) / median.
	VsBase       float64 `json:"vs_base,omitempty"`
	BaseNsPerPkt float64 `json:"base_ns_per_pkt,omitempty"`
	VsBaseSpread float64 `json:"vs_base_spread,omitempty"`
	// NoBase says why no base program was timed beside this one (the
	// base revision has no such object, or another layout).
	NoBase string `json:"no_base,omitempty"`
	// Spread is (max - min) / median of the rounds' ratios: the run-to-run
	// noise the tolerance is derived from.
	Spread float64 `json:"spread"`
	Rounds int     `json:"rounds"`
	// PrecisionNs is the resolution of one ns/pkt figure: the statistics
	// total whole nanoseconds, so 1 ns / packets timed.
	PrecisionNs float64 `json:"precision_ns"`
	Packets     int     `json:"packets"` // per round and side
	OnPath      float64 `json:"on_path"` // share of packets that took the path's counter
	Error       string  `json:"error,omitempty"`
}

// Behaviour is one test binary's outcome on one kernel.
type Behaviour struct {
	Exit int `json:"exit"`
	Pass int `json:"pass"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
	// FeatureSkips are the skips for a kernel feature the lab probes and
	// this kernel lacks (their reason starts with features.Prefix).
	FeatureSkips int      `json:"feature_skips,omitempty"`
	Failed       []string `json:"failed,omitempty"` // failing tests, with their first message
}
