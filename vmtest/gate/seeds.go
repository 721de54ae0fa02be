package gate

// Seed is one realistic bug the gate must catch: in File, the one
// occurrence of Old becomes New. Want is a piece of the gate's failure
// listing that points at the cause (a failing test's name, a figure).
// `make gate-teeth` applies each to a copy of the sources, rebuilds the
// program when a .c or .h changes, and runs the gate on the host; a seed
// whose Old is no longer in the sources fails there, naming itself, so a
// source change is met by updating the seed, never by dropping it
// silently. Add a row to add a bug.
type Seed struct {
	Name string // short, unique: the subtest's name
	Area string // what it breaks
	File string // relative to the module root
	Old  string
	New  string
	Want string
}

// Seeds are the bugs of the teeth test.
var Seeds = []Seed{
	{Name: "refill-per-packet", Area: "bucket arithmetic", File: "bpf/shield.c",
		Old: "(__s64)(elapsed * l->rate);", New: "(__s64)TOKEN; /* seeded: a token per packet, whatever the time */",
		Want: "TestRefillAtRate"},
	{Name: "refill-uncapped", Area: "bucket arithmetic", File: "bpf/shield.c",
		Old: "if (credit + add > (__s64)l->cap)", New: "if (0)",
		// A refill is at most a full bucket (fill_ns), so a drained bucket
		// stays within burst; a fuller one overshoots: two CPUs' drains,
		// and the admission bucket filled at start then refilled.
		Want: "TestConcurrentAccuracy"},
	{Name: "take-below-one-token", Area: "bucket arithmetic", File: "bpf/shield.c",
		// take_level: a tracked source's bucket (take() has the same
		// test for the admission bucket).
		Old: "if (b->credit < TOKEN)\n\t\treturn 0;\n\t/* No fetching add", New: "if (b->credit < 0)\n\t\treturn 0;\n\t/* No fetching add",
		Want: "TestBurstThenRefill"},
	{Name: "admission-ignored", Area: "admission", File: "bpf/shield.c",
		Old: "if (!adm || !take(adm, alim, now, cas))", New: "if (!adm || (0 && !take(adm, alim, now, cas)))",
		Want: "TestForgedFlood"},
	{Name: "fresh-source-extra-packet", Area: "admission", File: "bpf/shield.c",
		Old:  "victim->bucket.credit = (__s64)cfg->source.cap - (class == CLASS_PROTECTED ? TOKEN : 0);",
		New:  "victim->bucket.credit = (__s64)cfg->source.cap - (class == CLASS_PROTECTED ? 0 : 0);",
		Want: "TestBurstThenRefill"},
	{Name: "allow-read-as-deny", Area: "lists", File: "bpf/shield.c",
		Old: "return v->verdict & LIST_VERDICT;", New: "return LIST_DENY;",
		Want: "TestLists"},
	{Name: "deny-beats-nested-allow", Area: "lists (the Go that writes them)", File: "shield/lists/verdicts.go",
		Old: "if allowed[netip.PrefixFrom(p.Addr(), b).Masked()] {", New: "if false && allowed[netip.PrefixFrom(p.Addr(), b).Masked()] {",
		Want: "TestListsNested"},
	{Name: "ipv6-one-key-per-64", Area: "parsing", File: "bpf/shield.h",
		Old: "__builtin_memcpy(pkt->src, &ip6->saddr, 16);", New: "__builtin_memcpy(pkt->src, &ip6->saddr, 8); __builtin_memset(&pkt->src[8], 0, 8);",
		Want: "TestFamiliesAndTags"},
	{Name: "vlan-double-tag-unlimited", Area: "parsing", File: "bpf/shield.h",
		Old: "for (int i = 0; i < 2; i++) {", New: "for (int i = 0; i < 1; i++) {",
		Want: "TestFamiliesAndTags"},
	{Name: "icmpv6-counted-as-other", Area: "parsing", File: "bpf/shield.h",
		Old: "case IPPROTO_ICMPV6:\n", New: "",
		Want: "TestFamiliesAndTags"},
	{Name: "presence-bit-in-one-filter", Area: "presence filter", File: "bpf/shield.c",
		Old: "__u64 *w = presence_word(f, slot);", New: "__u64 *w = presence_word(cfg->filter, slot);",
		// A source admitted during a refresh, after its walk, must be in
		// the filter the refresh puts in force.
		Want: "TestPresenceFilter"},
	{Name: "presence-refresh-skips-walk", Area: "presence filter (the Go that rebuilds it)", File: "shield/presence.go",
		Old: "atomic.OrUint64(&mine[slot/64], 1<<(slot%64))", New: "_ = slot",
		Want: "TestPresenceFilter"},
	{Name: "regions-without-own", Area: "lists' regions", File: "shield/lists/verdicts.go",
		Old: "prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))", New: "_ = a",
		Want: "TestOwnAddressSpoofed"},
	{Name: "counter-index-drops-proto", Area: "counters", File: "bpf/shield.c",
		Old: "(verdict * REASON_MAX + reason) * PROTO_MAX + proto;", New: "(verdict * REASON_MAX + reason) * PROTO_MAX;",
		Want: "TestFixtures"},
	{Name: "counters-not-per-cpu", Area: "counters", File: "bpf/shield.c",
		Old:  "__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);\n\t__uint(max_entries, MAX_COUNTERS);\n\t__type(key, __u32);\n\t__type(value, __u64); /* packets */",
		New:  "__uint(type, BPF_MAP_TYPE_ARRAY);\n\t__uint(max_entries, MAX_COUNTERS);\n\t__type(key, __u32);\n\t__type(value, __u64); /* packets */",
		Want: "TestConcurrentAccuracy"},
	{Name: "dry-run-drops", Area: "dry-run", File: "bpf/shield.c",
		Old: "__u32 limited = flags & CONFIG_DRY_RUN ? VERDICT_PASS : VERDICT_DROP;", New: "__u32 limited = VERDICT_DROP;",
		Want: "TestDryRun"},
	{Name: "jiffies-not-in-ns", Area: "clocks", File: "bpf/shield.c",
		Old: "return bpf_jiffies64() * ns_per_jiffy;", New: "return bpf_jiffies64();",
		Want: "TestRealClockRates"},
	{Name: "compat-refill-keeps-last", Area: "compat program", File: "bpf/shield.c",
		Old: "\t\tb->last_ns = now;\n", New: "",
		Want: "github.com/xdpshield/xdpshield/shield/datapath -datapath.compat"},
	// Slow-downs: the host's paths are timed against the base revision's
	// program in the same rounds (measured here, 2 cores: each costs the
	// cheap paths 15-45% and the table's paths 0-13%).
	{Name: "speed-extra-lookup", Area: "speed: a hash lookup per packet", File: "bpf/shield.c",
		Old:  "\t__u64 *c = bpf_map_lookup_elem(&counters, &idx);\n",
		New:  "\tstruct dst_key seeded = {};\n\n\tbpf_map_lookup_elem(&protected_dsts, &seeded); /* seeded */\n\t__u64 *c = bpf_map_lookup_elem(&counters, &idx);\n",
		Want: "slower than the base revision's shield program"},
	{Name: "speed-sixteen-insns", Area: "speed: 16 dependent instructions per packet", File: "bpf/shield.c",
		Old:  "\t__u64 *c = bpf_map_lookup_elem(&counters, &idx);\n",
		New:  "\t__u64 seeded = idx;\n\n#pragma unroll\n\tfor (int i = 0; i < 16; i++) /* seeded */\n\t\tasm volatile(\"%0 *= 3\" : \"+r\"(seeded));\n\tasm volatile(\"\" ::\"r\"(seeded));\n\t__u64 *c = bpf_map_lookup_elem(&counters, &idx);\n",
		Want: "slower than the base revision's shield program"},
	// The balancer's paths are timed against its base the same way
	// (xdplb/...): the same two slow-downs, at its entry, before the
	// Ethernet type is read, so every path pays them.
	{Name: "xdplb-speed-extra-lookup", Area: "speed: a hash lookup per packet in the balancer", File: "bpf/xdplb.c",
		Old:  "\tif (eth->h_proto == bpf_htons(ETH_P_IP))\n\t\treturn lb4(ctx, data, data_end);\n",
		New:  "\tstruct vip_key seeded = {};\n\n\tbpf_map_lookup_elem(&vips, &seeded); /* seeded */\n\tif (eth->h_proto == bpf_htons(ETH_P_IP))\n\t\treturn lb4(ctx, data, data_end);\n",
		Want: "slower than the base revision's xdplb program"},
	{Name: "xdplb-speed-sixteen-insns", Area: "speed: 16 dependent instructions per packet in the balancer", File: "bpf/xdplb.c",
		Old:  "\tif (eth->h_proto == bpf_htons(ETH_P_IP))\n\t\treturn lb4(ctx, data, data_end);\n",
		New:  "\t__u64 seeded = eth->h_proto;\n\n#pragma unroll\n\tfor (int i = 0; i < 16; i++) /* seeded */\n\t\tasm volatile(\"%0 *= 3\" : \"+r\"(seeded));\n\tasm volatile(\"\" ::\"r\"(seeded));\n\tif (eth->h_proto == bpf_htons(ETH_P_IP))\n\t\treturn lb4(ctx, data, data_end);\n",
		Want: "slower than the base revision's xdplb program"},
	{Name: "parser-walks-eight-tags", Area: "verifier complexity", File: "bpf/shield.h",
		Old: "for (int i = 0; i < 2; i++) {", New: "for (int i = 0; i < 8; i++) {",
		Want: "insns processed grew"},
	{Name: "limit-max-refused", Area: "limit validation", File: "shield/config/limits.go",
		Old: "if v == 0 || v > max {", New: "if v == 0 || v >= max {",
		Want: "TestBoundaries"},
	{Name: "fill-time-halved", Area: "limits written", File: "shield/config/limits.go",
		Old: "FillNs: (c + rate - 1) / rate}", New: "FillNs: c / rate / 2}",
		Want: "TestBurstThenRefill"},
	{Name: "admission-burst-read-back", Area: "limits read back", File: "shield/config/limits.go",
		Old: "AdmissionBurst: cfg.Admission.Cap / Token,", New: "AdmissionBurst: cfg.Source.Cap / Token,",
		Want: "limits read back"},
	{Name: "source-dropped-is-passed", Area: "Source", File: "shield/source/source.go",
		Old: "Dropped: v.Dropped,", New: "Dropped: v.Passed,",
		Want: "Source().Dropped"},
	{Name: "limited-ignores-refill", Area: "Source().Limited", File: "shield/source/source.go",
		Old: "credit = min(credit+add, int64(l.Cap))", New: "credit = min(credit+0*add, int64(l.Cap))",
		Want: "Source().Limited"},
	{Name: "top-by-dropped-ranks-passed", Area: "Top", File: "shield/source/top.go",
		Old: "if h.by == ByPassed {", New: "if h.by != ByPassed {",
		Want: "TestTopOrders"},
}
