//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * shield: the XDP rate-limiting program of xdpshield.
 *
 * One packet: parse (Ethernet, up to two VLAN tags, IPv4/IPv6 source) ->
 * allow list -> deny list (one lookup) -> per-source token bucket (unknown sources go
 * through the admission bucket first) -> per-CPU counter -> PASS or DROP.
 * Anything the parser does not recognise passes: the shield limits, it does
 * not filter protocols.
 *
 * Loads on 5.10 and later: LPM trie (4.11), array of maps (4.12), global
 * data (5.2), bpf_jiffies64 (5.5), mmapable arrays and .bss (5.5).
 * Atomics: lock-add (BPF_XADD) everywhere; the refill's compare-and-exchange
 * (BPF_CMPXCHG) needs 5.12, so shield_compat, without it, stands in for
 * shield on older kernels (the loader probes and chooses).
 */
#include "shield.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* The numbers user space shares with this program are named enums, not
 * #defines, so bpf2go emits them (-type, bpf/gen.go) and shield/ derives its
 * constants from them; struct contract below puts them in the BTF. */

/* One packet costs TOKEN credit; a bucket gains `rate` credit per nanosecond,
 * so credit is in packet-nanoseconds and needs no division per packet. */
enum credit {
	TOKEN = 1000000000,
};

/* Clock sources, chosen at load time through clock_mode. The loader's
 * default, jiffies, is 0: shield.Options' zero value. */
enum clock {
	CLOCK_JIFFIES = 0, /* bpf_jiffies64 * ns_per_jiffy: ~2 ns, 1/HZ resolution */
	CLOCK_KTIME = 1,   /* bpf_ktime_get_ns: exact, ~34 ns on this VM */
	CLOCK_VIRTUAL = 2, /* virtual_now_ns, set from user space (simulator) */
};

/* Load-time switches: the verifier removes the branches they rule out. */
const volatile __u8 clock_mode = CLOCK_KTIME;
const volatile __u64 ns_per_jiffy = 4000000; /* 1e9 / CONFIG_HZ, measured by the loader */
/* How far a bucket's last_ns may lie ahead of this CPU's clock reading before
 * it is taken for a reading of another clock (a restart with another clock
 * on the same pins): two CPUs' readings differ by up to a jiffy (jiffies) or
 * a few nanoseconds (ktime). Set by the loader; 0 for the virtual clock. */
const volatile __u64 clock_slack_ns = 0;

/* The keys of hash_of, derived by the loader from config.filter_seed
 * (shield.hashKeys), and log2 of the table's sets: both fixed for the life
 * of a table. */
const volatile __u64 hash_key[5] = {1, 3, 5, 7, 0};
const volatile __u32 set_bits = 18;

/* The simulator's clock; only read when clock_mode == CLOCK_VIRTUAL. */
volatile __u64 virtual_now_ns;

/* Written by clock_probe, read by the loader to measure CONFIG_HZ. */
volatile __u64 probe_jiffies;
volatile __u64 probe_ktime_ns;

/* A token bucket. Shared by every CPU that sees the source: debits are atomic,
 * refills are not (see take()). */
struct bucket {
	__u64 last_ns; /* clock reading of the last refill (see refill() for one ahead of now) */
	__s64 credit;  /* packet-nanoseconds; may dip below 0 under races */
};

/* Limit of one bucket, in the form the data path needs: no division. */
struct limit {
	__u64 rate;    /* packets per second == credit gained per nanosecond */
	__u64 cap;     /* burst * TOKEN: credit of a full bucket */
	__u64 fill_ns; /* nanoseconds from empty to full: ceil(cap / rate) */
};

/* config.flags */
enum config_flag {
	CONFIG_DRY_RUN = 1 << 0, /* count would-be limit/admission drops, pass them */
	CONFIG_ALLOW4 = 1 << 1,  /* the allow list has IPv4 entries: the verdict trie is looked up */
	CONFIG_ALLOW6 = 1 << 2,
	CONFIG_DENY4 = 1 << 3,
	CONFIG_DENY6 = 1 << 4,
	CONFIG_OWN4 = 1 << 5,          /* own4 has entries: lists4 is looked up */
	CONFIG_OWN6 = 1 << 6,
	CONFIG_PROTECT = 1 << 7,       /* protected destinations are named; else all are */
	CONFIG_PROTECT_ICMP = 1 << 8,  /* ICMP and ICMPv6 are protected */
	CONFIG_PROTECT_ADDR = 1 << 9,  /* *_addr_ports has bits: protected_dsts is looked up */
	CONFIG_LISTS_B = 1 << 10,      /* the lists in force are lists4_b/lists6_b, else lists4/lists6 */
	CONFIG_AGGREGATE = 1 << 11,    /* aggregates has entries: looked up for protected packets */
	/* Bits from here up are user space's, never read here: the loader
	 * records the clock (clock_mode + 1) the state was written with. */
	CONFIG_CLOCK_SHIFT = 24,
};

/* Port bitmaps: bit (port & 63) of word (port >> 6). */
#define PORT_WORDS (65536 / 64)

/* Region bitmaps of the lists: bit r (as in a port bitmap) is set when a
 * prefix of the verdict tries may cover an address of region r: for IPv4
 * its first 16 bits, for IPv6 its bits 16 to 31 (the first 16 are 2001 or
 * 2a0x for most of the Internet). A clear bit answers "no list holds it"
 * without the trie lookup; a set one costs the lookup, as before. */
#define REGION_WORDS (65536 / 64)

/* Own addresses held in the configuration and compared inline, per family:
 * a machine has a few, and a compare is far cheaper than a trie lookup.
 * A family with more lives in the verdict tries (LIST_OWN) instead. */
#define OWN_INLINE 8

/* Traffic classes: what is protected is held to the client limits; the rest
 * (the edge's own return traffic, above all) to limits of its own. */
enum traffic_class {
	CLASS_PROTECTED = 0,
	CLASS_UNPROTECTED = 1,
	MAX_CLASSES,
};

struct config {
	struct limit source;                /* every source, protected destinations */
	struct limit admission;             /* global: new sources per second, protected */
	struct limit unprotected;           /* every source, other destinations */
	struct limit unprotected_admission; /* global: new sources per second, other */
	__u64 mask6[2]; /* an IPv6 source's key: the address AND this (prefix length) */
	__u32 mask4;    /* an IPv4 source's key: the address AND this (network order) */
	__u32 flags;    /* CONFIG_* */
	__u32 own4_n;   /* own IPv4 addresses in own4 (0 to OWN_INLINE) */
	__u32 own6_n;   /* own IPv6 addresses in own6 (0 to OWN_INLINE) */
	__u32 filter;   /* the presence filter that answers (0 or 1): see presence */
	/* The edge's ephemeral ports (its net.ipv4.ip_local_port_range,
	 * which IPv6 shares), host order: return traffic comes back to
	 * them. 0, 0 (a configuration written before they were): none, so
	 * nothing is return traffic. */
	__u16 eph_lo;
	__u16 eph_hi;
	__u64 filter_seed; /* keys the presence filter's hash (random, kept across restarts) */
	__u32 own4[OWN_INLINE];    /* network order, as read from the header */
	__u64 own6[OWN_INLINE][2]; /* the address as two words, as read */
	__u64 tcp_ports[PORT_WORDS];      /* TCP ports protected on every address */
	__u64 udp_ports[PORT_WORDS];      /* UDP ports protected on every address */
	__u64 tcp_addr_ports[PORT_WORDS]; /* TCP ports protected on some addresses */
	__u64 udp_addr_ports[PORT_WORDS]; /* UDP ports protected on some addresses */
	__u64 regions4[REGION_WORDS];     /* IPv4 regions a list may cover */
	__u64 regions6[REGION_WORDS];     /* IPv6 regions a list may cover */
};

/* clang emits BTF only for types a global reaches; the inner map's value is
 * reached through a pointer only, so name it here (bpf2go needs it too). */
const struct config *unused_config __attribute__((unused));

struct src_key {
	__u8 addr[16]; /* IPv6, or IPv4 mapped as ::ffff:a.b.c.d */
};

/* source.passed's top bit: the way holds a source. The key cannot say it:
 * every 128-bit value is some source's key (IPv4 fills ::ffff:0:0/96, and
 * an IPv6 prefix such as ::/64 is all zero), and an insertion counts its
 * first packet, so a count of 0 would do only by convention; a packet count
 * never reaches 2^63. An all-zero way (the array's initial state) is empty. */
#define SOURCE_USED (1ULL << 63)

/* Per-source state: one way of the sources table, 64 bytes (a cache line).
 * A source is an IPv4 address or an IPv6 prefix (config.mask6), keyed in
 * mapped form. */
struct source {
	struct src_key key;        /* valid when passed has SOURCE_USED */
	struct bucket bucket;      /* protected destinations: the client limits */
	struct bucket unprotected; /* everything else: the unprotected limits */
	__u64 passed;  /* SOURCE_USED | packets passed (including the first, admitted one) */
	__u64 dropped; /* packets dropped, or that would be dropped in dry-run */
};

/* The ways of one set of the sources table (see sources). */
#define WAYS 4
struct source_set {
	struct source way[WAYS];
};

struct lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* A destination protected on one address only (config.*_addr_ports). */
struct dst_key {
	__u8 addr[16]; /* IPv6, or IPv4 mapped as ::ffff:a.b.c.d */
	__u8 proto;    /* PROTO_TCP or PROTO_UDP */
	__u8 _pad;
	__be16 port;
};

/* Counters: index (verdict * REASON_MAX + reason) * PROTO_MAX + proto. */
#define MAX_COUNTERS (VERDICT_MAX * REASON_MAX * PROTO_MAX)
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_COUNTERS);
	__type(key, __u32);
	__type(value, __u64); /* packets */
} counters SEC(".maps");

/* The bytes of those packets (the frame from its Ethernet header), same
 * index: a map of its own so pinned counters of earlier versions stay
 * usable. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_COUNTERS);
	__type(key, __u32);
	__type(value, __u64); /* bytes */
} byte_counters SEC(".maps");

/*
 * Per-source buckets: a set-associative table, an array of sets of WAYS
 * ways (kernel 5.5+ for BPF_F_MMAPABLE: user space reads it through a
 * mapping). A source lives in the set its keyed hash names (hash_of, set_of)
 * or nowhere; an array lookup is inlined by the verifier, no kernel call.
 * A stranger the admission bucket admits replaces, in its set: an empty way,
 * else the least recently used of the ways idle for their buckets' fill_ns
 * (full buckets: nothing is lost but the counts), else the least recently
 * used way (see insert()). The loader sets max_entries: the table's size
 * (default 1,048,576 sources) / WAYS sets, a power of two.
 */
#define MAX_SETS ((1 << 20) / WAYS)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SETS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct source_set);
} sources SEC(".maps");

/* Evictions: insertions into the sources table that replaced a source (an
 * idle one, see insert()), not an empty way; per CPU, summed by user space
 * (Shield.Evictions). A map of its own so pinned maps of earlier versions
 * stay usable. The path is paid for by an admission token, so it runs at
 * most at the admission rate. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64); /* sources replaced */
} evictions SEC(".maps");

/*
 * The presence filter: one bit per slot, set for every source the table
 * holds (slot_of), so a stranger whose bit is clear is known to be one
 * without a lookup in the big table, a cache and TLB miss per packet when
 * a forged flood brings a new source each time. A set bit costs the lookup
 * as before: bits of evicted sources stay set until user space rebuilds.
 * Two filters, FILTER_WORDS words each: config.filter says which one
 * answers; an insertion sets the bit in both, so the other can be cleared
 * and refilled from a walk of the table (Shield.RefreshFilter) and then
 * put in force without missing a source inserted meanwhile. mmapable: user
 * space sets bits with atomic ORs. Only `shield` uses it (an atomic OR
 * needs 5.12, like the refill's cmpxchg): shield_compat looks every source
 * up, as before.
 */
#define FILTER_BITS (1 << 24) /* 2 MiB: ~6% of bits set by a full default table */
#define FILTER_WORDS (FILTER_BITS / 64)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * FILTER_WORDS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64); /* 64 slots */
} presence SEC(".maps");

/* Capacity of the allow and deny lists (they live in the verdict tries
 * below, which are also their record). */
enum list_capacity {
	MAX_LIST_ENTRIES = 65536, /* per list and family */
	MAX_OWN_ENTRIES = 4096,   /* own4_addrs, own6_addrs */
	/* Hit counters of the verdict tries' entries (rule_counts): one per
	 * entry of one family's trie; both families share them, and entries
	 * beyond are not counted (list_value.rule is NO_RULE). */
	MAX_RULES = 2 * MAX_LIST_ENTRIES + MAX_OWN_ENTRIES,
	NO_RULE = 0xffffffff,
};

/* The machine's own addresses, as the service found them (a record; the
 * program compares config.own4/own6, or finds LIST_OWN in the verdict
 * tries for a family with more than OWN_INLINE). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_OWN_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4_key);
	__type(value, __u8);
} own4_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_OWN_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6_key);
	__type(value, __u8);
} own6_addrs SEC(".maps");

/* Destinations protected on one address (the value is unused). */
enum dst_capacity {
	MAX_PROTECTED_DSTS = 4096,
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROTECTED_DSTS);
	__type(key, struct dst_key);
	__type(value, __u8);
} protected_dsts SEC(".maps");

/* The verdict tries: every prefix of either list, per family, valued with
 * what a packet whose longest match it is gets. Every list prefix containing
 * an address contains that address's longest match, so the address is
 * allowed iff an allow prefix contains the match: the loader computes that
 * per entry. One lookup decides both lists, and allow wins over deny even
 * when the deny prefix is the more specific.
 *
 * Two generations, A (lists4/lists6) and B (lists4_b/lists6_b): the
 * configuration's CONFIG_LISTS_B says which one is in force. A change is
 * written whole into the other generation, then put in force by the one
 * swap of the configuration (config_map): a packet, and a crash of the
 * writer at any point, sees the old lists or the new ones, never a mix.
 * The generation in force is also the record of the lists (LIST_IN_*
 * bits): there is nothing to roll back. */
enum list_verdict {
	LIST_ALLOW = 1,    /* an allow prefix covers the entry: pass, never limited */
	LIST_DENY = 2,     /* only deny prefixes cover it: drop */
	LIST_OWN = 3,      /* an own address (a host prefix): spoofed from the wire */
	LIST_VERDICT = 3,  /* the bits above: what the program reads */
	LIST_IN_ALLOW = 4, /* the prefix is on the allow list (the record) */
	LIST_IN_DENY = 8,  /* the prefix is on the deny list */
};
#define MAX_VERDICT_ENTRIES (2 * MAX_LIST_ENTRIES + MAX_OWN_ENTRIES)
struct list_value {
	__u32 rule;   /* the entry's hit counter in rule_counts, or NO_RULE */
	__u8 verdict; /* LIST_ALLOW, LIST_DENY or LIST_OWN | LIST_IN_* */
	__u8 _pad[3];
};
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_VERDICT_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4_key);
	__type(value, struct list_value);
} lists4 SEC(".maps"), lists4_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_VERDICT_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6_key);
	__type(value, struct list_value);
} lists6 SEC(".maps"), lists6_b SEC(".maps");

/* Packets whose longest listed match was an entry, per entry
 * (list_value.rule) and CPU: CPU c counts rule r at c * MAX_RULES + r, a
 * region of its own, so a flood on one deny prefix never bounces a shared
 * line between CPUs. One array, not a per-CPU array of MAX_RULES elements:
 * that allocates each element apart, most of a load's time under
 * emulation, and user space reads and zeroes these through a mapping. User
 * space sizes it (MAX_RULES times the possible CPUs), keeps an entry's
 * rule across changes and zeroes a rule before giving it to a new entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES); /* times the possible CPUs, at load */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rule_counts SEC(".maps");

/* The configuration lives in an inner array that user space replaces whole:
 * the outer slot is swapped atomically and a running program keeps the map it
 * looked up (RCU), so a packet never sees half an old, half a new config. */
struct config_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct config_inner);
} config_map SEC(".maps");

/* Aggregate limits: the capacity of a protected destination (a protocol
 * and port, on every address), in packets/s shared by every source. */
struct agg_key {
	__u8 proto; /* PROTO_TCP, PROTO_UDP or PROTO_ICMP (port 0) */
	__u8 _pad;
	__be16 port;
};

struct aggregate {
	struct bucket bucket; /* shared by every CPU and source */
	struct limit limit;
	/* Credit a stranger leaves in the bucket: strangers pass only while
	 * it holds more, so established sources are served first and
	 * strangers shed first. burst / 2 * TOKEN, set by user space. */
	__s64 reserve;
};

enum agg_capacity {
	MAX_AGGREGATES = 64,
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_AGGREGATES);
	__type(key, struct agg_key);
	__type(value, struct aggregate);
} aggregates SEC(".maps");

/* The global admission buckets, one per class (CLASS_*), for all CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct bucket);
} admission SEC(".maps");

/* clang emits BTF only for types a global reaches: this one reaches the
 * enums user space shares, so bpf2go can emit them (-type). */
struct contract {
	enum reason reason;
	enum proto proto;
	enum verdict verdict;
	enum credit credit;
	enum clock clock;
	enum config_flag flag;
	enum traffic_class class;
	enum list_capacity list_capacity;
	enum dst_capacity dst_capacity;
	enum list_verdict list;
};
const struct contract *unused_contract __attribute__((unused));

/* now_ns is the only place the data path reads time. */
static __always_inline __u64 now_ns(void)
{
	if (clock_mode == CLOCK_VIRTUAL)
		return virtual_now_ns;
	if (clock_mode == CLOCK_JIFFIES)
		return bpf_jiffies64() * ns_per_jiffy;
	return bpf_ktime_get_ns();
}

/*
 * refill adds the credit earned since the bucket's last refill, capped at a
 * full bucket.
 *
 * With cas (the `shield` program, kernel 5.12+), a refill is claimed by
 * moving last_ns with a compare-and-exchange: every nanosecond of credit is
 * added by exactly one CPU. A CPU that loses the exchange skips the refill;
 * the winner moved last_ns to a time at least that CPU's reading or the next
 * refill adds the difference, so no credit is lost. The cap is applied to
 * the credit read after the claim: a debit racing in between only lowers the
 * result; two refills of two different instants racing each other can
 * overshoot the cap by the later one's credit, rate * (the gap between the
 * two clock readings), far under one packet for any gap of nanoseconds.
 *
 * Without cas (`shield_compat`, kernels 5.10 and 5.11, which lack
 * BPF_CMPXCHG and refuse the instruction even in dead code), two CPUs that
 * read the same last_ns both add the credit earned since: each extra CPU
 * can add up to one more full refill per clock reading.
 */
static __always_inline void refill(struct bucket *b, const struct limit *l, __u64 now, const int cas)
{
	__u64 last = b->last_ns;
	__u64 elapsed;

	if (now > last) {
		elapsed = now - last;
	} else if (last - now > l->fill_ns + clock_slack_ns) {
		/* last_ns is further ahead than any CPU's reading of this clock
		 * can be: another clock wrote it (jiffies x ns_per_jiffy runs
		 * ~2^32 jiffies ahead of ktime). Waiting for this clock to catch
		 * up would stall the bucket for months: count it as idle for a
		 * full refill, and restart its time from now. */
		elapsed = l->fill_ns;
	} else {
		return;
	}
	if (cas) {
		if (__sync_val_compare_and_swap(&b->last_ns, last, now) != last)
			return;
	} else {
		b->last_ns = now;
	}

	__s64 credit = b->credit;
	__s64 add = elapsed >= l->fill_ns ? (__s64)l->cap : (__s64)(elapsed * l->rate);

	if (credit + add > (__s64)l->cap)
		add = (__s64)l->cap - credit;
	__sync_fetch_and_add(&b->credit, add);
}

/*
 * take refills b and takes one packet's credit; it returns whether the
 * packet may pass.
 *
 * Accuracy with several CPUs on one bucket (the clock frozen, e.g. within
 * one clock reading): a debit is an atomic add, so no passed packet goes
 * uncharged, but the check and the debit are two steps: when the bucket runs
 * dry, each of the other CPUs may have checked and not yet debited, so a
 * drain of a bucket holding burst packets passes at most burst + (CPUs - 1).
 * The overshoot leaves the credit negative, a debt the next refill repays
 * (the cap applies to credit + refill), so over any number of drains the
 * total passed is at most drains * burst + (CPUs - 1), and at least
 * drains * burst. sim.TestConcurrentAccuracy checks both on two CPUs.
 */
static __always_inline int take(struct bucket *b, const struct limit *l, __u64 now, const int cas)
{
	refill(b, l, now, cas);
	if (b->credit < TOKEN)
		return 0;
	__sync_fetch_and_add(&b->credit, -TOKEN);
	return 1;
}

/*
 * aggregate_ok takes one packet's credit from the aggregate limit of the
 * destination k (an agg_key as a word), if it has one; it returns whether
 * the packet may pass. A stranger (not in the sources table, or one
 * whose own bucket is under half full: it sends at or over its rate)
 * passes only while the bucket holds more than its reserve: established
 * sources within their rate are served first, strangers and sources at
 * their limit shed first.
 */
static __always_inline int aggregate_ok(__u32 w, __u64 now, __u32 stranger, __u32 gate, const int cas)
{
	if (!gate)
		return 1;
	/* w: proto | has_port << 8 | dport << 16 (see run()). */
	struct agg_key k = {.proto = w & 0xff};

	if (k.proto != PROTO_ICMP && (w >> 8) & 1)
		k.port = (__be16)(w >> 16);
	struct aggregate *a = bpf_map_lookup_elem(&aggregates, &k);

	if (!a)
		return 1;
	refill(&a->bucket, &a->limit, now, cas);
	if (a->bucket.credit < TOKEN + (stranger ? a->reserve : 0))
		return 0;
	__sync_fetch_and_add(&a->bucket.credit, -TOKEN);
	return 1;
}

/* The two instances of aggregate_ok, global functions: the verifier checks
 * each once, not once per path of run() that reaches it. gate: the packet
 * is protected and some destination has an aggregate limit. */
__attribute__((noinline)) int aggregate_cas(__u32 w, __u64 now, __u32 stranger, __u32 gate)
{
	return aggregate_ok(w, now, stranger, gate, 1);
}

__attribute__((noinline)) int aggregate_compat(__u32 w, __u64 now, __u32 stranger, __u32 gate)
{
	return aggregate_ok(w, now, stranger, gate, 0);
}

/* take_level is take for a tracked source: 0 refused, 1 passed, 2 passed
 * leaving its bucket under half full (it sends at or over its rate): the
 * sign of credit - cap / 2, both far under 2^62, without a branch. */
static __always_inline int take_level(struct bucket *b, const struct limit *l, __u64 now, const int cas)
{
	refill(b, l, now, cas);
	if (b->credit < TOKEN)
		return 0;
	/* No fetching add: 5.10 and 5.11 have none (shield_compat). The
	 * read after it may see other CPUs' debits too: close enough. */
	__sync_fetch_and_add(&b->credit, -TOKEN);
	return 1 + (int)((__u64)(b->credit - (__s64)(l->cap >> 1)) >> 63);
}

/* account counts a verdict (packets and bytes) and returns the XDP
 * action in the low byte, the reason and protocol above it for capture
 * (then() strips them). */
static __always_inline int account(__u64 len, __u32 verdict, __u32 reason, __u32 proto)
{
	__u32 idx = (verdict * REASON_MAX + reason) * PROTO_MAX + proto;
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += 1;
	c = bpf_map_lookup_elem(&byte_counters, &idx);
	if (c)
		*c += len;
	return (verdict == VERDICT_DROP ? XDP_DROP : XDP_PASS) | reason << 8 | proto << 16;
}

/* Capture of dropped frames (GET /v1/capture, shield/capture.go): 0 is
 * off (the cost is this one load and branch per drop), else one drop in
 * capture_sample goes to the captured perf buffer, at most CAPTURE_SNAP
 * bytes of it after a capture_meta. */
volatile __u32 capture_sample;
#define CAPTURE_SNAP 256

struct capture_meta {
	__u32 reason;  /* enum reason */
	__u32 proto;   /* enum proto */
	__u32 len;     /* the frame's length */
	__u32 cap_len; /* the bytes that follow (up to CAPTURE_SNAP) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} captured SEC(".maps");

static __always_inline void capture(struct xdp_md *ctx, int ret)
{
	__u32 sample = capture_sample;

	if (!sample || (sample > 1 && bpf_get_prandom_u32() % sample))
		return;
	__u64 len = ctx->data_end - ctx->data;
	struct capture_meta meta = {
		.reason = (ret >> 8) & 0xff,
		.proto = (ret >> 16) & 0xff,
		.len = len,
		.cap_len = len < CAPTURE_SNAP ? len : CAPTURE_SNAP,
	};
	bpf_perf_event_output(ctx, &captured, BPF_F_CURRENT_CPU | (__u64)meta.cap_len << 32, &meta, sizeof(meta));
}

/* in_region says whether bit r of a region bitmap is set. */
static __always_inline int in_region(const __u64 *bits, __u32 r)
{
	return (bits[(r >> 6) & (REGION_WORDS - 1)] >> (r & 63)) & 1;
}

/* listed returns LIST_ALLOW, LIST_DENY, LIST_OWN or 0 (none of them). A
 * family whose lists and own addresses are all empty costs no lookup, and
 * neither does an address in a region no list prefix reaches. */
static __always_inline int listed(const struct packet *pkt, const struct config *cfg, __u32 flags, __u32 *rule)
{
	struct list_value *v;

	if (pkt->is_v6) {
		struct lpm6_key k = {.prefixlen = 128};

		if (!(flags & (CONFIG_ALLOW6 | CONFIG_DENY6 | CONFIG_OWN6)))
			return 0;
		if (!in_region(cfg->regions6, bpf_ntohl(((const __u32 *)pkt->src)[0]) & 0xffff))
			return 0;
		__builtin_memcpy(k.addr, pkt->src, 16);
		/* Two call sites (the asm keeps clang from merging them into
		 * one with either map): a site that sees one map is made a
		 * direct call of the trie's lookup by the verifier, one that
		 * sees two stays the generic helper, an indirect call. */
		if (flags & CONFIG_LISTS_B) {
			v = bpf_map_lookup_elem(&lists6_b, &k);
			asm volatile("/* lists6_b */" : "+r"(v));
		} else {
			v = bpf_map_lookup_elem(&lists6, &k);
			asm volatile("/* lists6 */" : "+r"(v));
		}
	} else {
		struct lpm4_key k = {.prefixlen = 32};

		if (!(flags & (CONFIG_ALLOW4 | CONFIG_DENY4 | CONFIG_OWN4)))
			return 0;
		if (!in_region(cfg->regions4, bpf_ntohl(((const __u32 *)pkt->src)[3]) >> 16))
			return 0;
		__builtin_memcpy(k.addr, &pkt->src[12], 4);
		if (flags & CONFIG_LISTS_B) {
			v = bpf_map_lookup_elem(&lists4_b, &k);
			asm volatile("/* lists4_b */" : "+r"(v));
		} else {
			v = bpf_map_lookup_elem(&lists4, &k);
			asm volatile("/* lists4 */" : "+r"(v));
		}
	}
	if (!v)
		return 0;
	*rule = v->rule;
	return v->verdict & LIST_VERDICT;
}

/* mapped says whether an IPv6 source is IPv4-mapped (::ffff:0:0/96). */
static __always_inline int mapped(const struct packet *pkt)
{
	const __u32 *w = (const __u32 *)pkt->src;

	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

/* own says whether the source is one of the machine's own addresses held
 * inline in the configuration. */
static __always_inline int own(const struct packet *pkt, const struct config *cfg)
{
	if (pkt->is_v6) {
		__u32 n = cfg->own6_n;
		__u64 w[2];

		if (!n)
			return 0;
		__builtin_memcpy(w, pkt->src, 16);
#pragma unroll
		for (int i = 0; i < OWN_INLINE; i++) {
			if (i >= n)
				break;
			if (cfg->own6[i][0] == w[0] && cfg->own6[i][1] == w[1])
				return 1;
		}
		return 0;
	}
	__u32 n = cfg->own4_n;
	__u32 a = ((const __u32 *)pkt->src)[3];

#pragma unroll
	for (int i = 0; i < OWN_INLINE; i++) {
		if (i >= n)
			break;
		if (cfg->own4[i] == a)
			return 1;
	}
	return 0;
}

/* named says whether a TCP or UDP packet's destination is one the
 * configuration protects by name (on every address or on its own). */
static __always_inline int named(const struct packet *pkt, const struct config *cfg, __u32 flags)
{
	__u32 port = bpf_ntohs(pkt->dport);
	__u32 word = port >> 6;
	__u64 bit = 1ULL << (port & 63);
	int tcp = pkt->proto == PROTO_TCP;

	/* The mask is a no-op the compiler would drop (port < 65536); 5.10's
	 * verifier may not know that bound of the copy it indexes with. */
	asm volatile("" : "+r"(word));
	word &= PORT_WORDS - 1;
	if ((tcp ? cfg->tcp_ports[word] : cfg->udp_ports[word]) & bit)
		return 1;
	if (!(flags & CONFIG_PROTECT_ADDR))
		return 0;
	if (!((tcp ? cfg->tcp_addr_ports[word] : cfg->udp_addr_ports[word]) & bit))
		return 0;

	struct dst_key k = {.proto = pkt->proto, .port = pkt->dport};

	__builtin_memcpy(k.addr, pkt->dst, 16);
	return bpf_map_lookup_elem(&protected_dsts, &k) != 0;
}

/*
 * class_of says which limits hold the packet. CLASS_PROTECTED when the
 * configuration names no destination (everything is protected). Else the
 * unprotected class is return traffic to connections the edge opened, and
 * nothing more: a return candidate (parse_l4: UDP, TCP without SYN or
 * with SYN+ACK, an ICMP error quoting TCP or UDP) whose port is one of
 * the edge's ephemeral ports (config.eph_lo..eph_hi), and is no protected
 * destination (a named TCP/UDP port, or ICMP when "icmp" is named). A
 * bare SYN, ICMP echo, another protocol, a non-first fragment, a header
 * cut short, an IPv6 extension chain not walked: all protected. When in
 * doubt, the strict class.
 */
static __always_inline int class_of(const struct packet *pkt, const struct config *cfg)
{
	__u32 flags = cfg->flags;

	if (!(flags & CONFIG_PROTECT))
		return CLASS_PROTECTED;
	if (!pkt->ret)
		return CLASS_PROTECTED;

	__u32 port = bpf_ntohs(pkt->dport);

	if (port < cfg->eph_lo || port > cfg->eph_hi || port == 0)
		return CLASS_PROTECTED;
	if (pkt->proto == PROTO_ICMP)
		return flags & CONFIG_PROTECT_ICMP ? CLASS_PROTECTED : CLASS_UNPROTECTED;
	return named(pkt, cfg, flags) ? CLASS_PROTECTED : CLASS_UNPROTECTED;
}

/* source_key is the key of the packet's source: an IPv4 address or an IPv6
 * address masked to the configured prefix (IPv4 may be masked too). */
static __always_inline void source_key(const struct packet *pkt, const struct config *cfg, struct src_key *key)
{
	__u64 w[2];

	__builtin_memcpy(w, pkt->src, 16);
	if (pkt->is_v6) {
		w[0] &= cfg->mask6[0];
		w[1] &= cfg->mask6[1];
	} else {
		__u32 a = ((const __u32 *)pkt->src)[3] & cfg->mask4;

		w[1] = (w[1] & 0xffffffffULL) | ((__u64)a << 32);
	}
	__builtin_memcpy(key->addr, w, 16);
}

/*
 * hash_of is a source key's hash: multiply-add over its four 32-bit words
 * with 64-bit random keys (hash_key, Thorup's strongly universal vector
 * hashing), so two keys chosen without knowing the keys have sums that
 * differ by a random amount: no one can aim forged sources at a known
 * source's set or filter slot. The sum is linear, though: the addresses of
 * one network, keys in arithmetic progression, would land in sets in
 * arithmetic progression, and for a seed in a few pile up in some (a /16
 * overflowed 2,844 sets of the default table for one seed in 64). A fixed
 * bijection (xorshift, multiply) breaks the progression and keeps the
 * random difference. The four multiplies are independent; the mix adds two
 * steps. Only the top 32 bits are used. shield.hashOf mirrors it.
 */
#define HASH_MIX 0xbf58476d1ce4e5b9ULL
static __always_inline __u64 hash_of(const struct src_key *key)
{
	__u32 x[4];

	__builtin_memcpy(x, key->addr, 16);
	__u64 h = hash_key[0] * x[0] + hash_key[1] * x[1] + hash_key[2] * x[2] + hash_key[3] * x[3] + hash_key[4];

	h ^= h >> 31;
	return h * HASH_MIX;
}

/* slot_of is a hash's slot in the presence filter: its top 24 bits. */
static __always_inline __u32 slot_of(__u64 h)
{
	return h >> (64 - 24);
}

/* set_of is a hash's set in the sources table: its top set_bits bits. */
static __always_inline __u32 set_of(__u64 h)
{
	return (h >> 32) >> (32 - set_bits);
}

/* find returns the way of set holding key, or 0. */
static __always_inline struct source *find(struct source_set *set, const struct src_key *key)
{
	__u64 k[2];

	__builtin_memcpy(k, key->addr, 16);
#pragma unroll
	for (int i = 0; i < WAYS; i++) {
		struct source *e = &set->way[i];
		const __u64 *ek = (const __u64 *)e->key.addr;

		if (ek[0] == k[0] && ek[1] == k[1] && (e->passed & SOURCE_USED))
			return e;
	}
	return 0;
}

/* idle says whether a bucket last refilled at last is full by now, under a
 * limit that fills it in fill ns; a time further ahead than this clock can
 * be was written by another clock, and refill() gives it a full bucket. */
static __always_inline int idle(__u64 last, __u64 now, __u64 fill)
{
	if (now >= last)
		return now - last >= fill;
	return last - now > fill + clock_slack_ns;
}

/*
 * insert writes a fresh source with key into set: into an empty way, else
 * the least recently used of the ways whose buckets are both full by now
 * (idle for their fill_ns: replacing one loses its counts, no state). A way
 * whose source sent within its fill time is busy and never replaced: when
 * every way of the set is busy, the stranger passes (its admission token
 * paid) without being tracked, and returns 0. So no flood, at any
 * admission rate, takes the way of a source that keeps sending; a set
 * full of busy sources only makes a newcomer pay admission for each packet
 * until a way idles. A way's last use is its buckets' latest refill, which
 * every packet makes (to the clock's tick).
 *
 * Concurrency: the writes are plain stores, and another CPU may insert into
 * the same set, or read the way, at the same time. The way is marked empty
 * first and used last, so a lookup meanwhile mostly misses it (its source is
 * a stranger for a packet); a torn entry (one CPU's key with the other's
 * buckets, or a key mixing both) is a source with a fresh bucket, or a key
 * no packet carries, which idles and is replaced first. Two CPUs inserting
 * the same key may give it two ways: lookups take the first, the other
 * idles out. Each such race costs at most one insertion per CPU, each paid
 * for by an admission token, so the table's churn stays bounded by the
 * admission rate.
 */
static __always_inline int insert(struct source_set *set, const struct src_key *key, const struct config *cfg,
				  __u64 now, int class)
{
	struct source *victim = &set->way[0];
	__u64 best = ~0ULL;

#pragma unroll
	for (int i = 0; i < WAYS; i++) {
		struct source *e = &set->way[i];

		if (!(e->passed & SOURCE_USED)) {
			victim = e;
			best = 0;
			break;
		}
		__u64 lb = e->bucket.last_ns, lu = e->unprotected.last_ns;
		/* Clock readings stay under 2^63: the top bit marks a busy
		 * way, ranked after every idle one. */
		__u64 score = (lb > lu ? lb : lu) >> 1;

		if (!idle(lb, now, cfg->source.fill_ns) || !idle(lu, now, cfg->unprotected.fill_ns))
			score |= 1ULL << 63;
		if (score < best) {
			best = score;
			victim = e;
		}
	}
	if (best >> 63)
		return 0; /* every way busy */
	if (victim->passed & SOURCE_USED) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&evictions, &zero);

		if (n)
			*n += 1;
	}
	victim->passed = 0;
	asm volatile("" ::: "memory");
	__builtin_memcpy(victim->key.addr, key->addr, 16);
	/* Both buckets start full, less the packet admitted. */
	victim->bucket.last_ns = now;
	victim->bucket.credit = (__s64)cfg->source.cap - (class == CLASS_PROTECTED ? TOKEN : 0);
	victim->unprotected.last_ns = now;
	victim->unprotected.credit = (__s64)cfg->unprotected.cap - (class == CLASS_PROTECTED ? 0 : TOKEN);
	victim->dropped = 0;
	asm volatile("" ::: "memory");
	victim->passed = SOURCE_USED | 1;
	return 1;
}

/* presence_word returns the word of the filter f holding slot. */
static __always_inline __u64 *presence_word(__u32 f, __u32 slot)
{
	__u32 i = (f & 1) * FILTER_WORDS + slot / 64;

	return bpf_map_lookup_elem(&presence, &i);
}

static __always_inline int run(struct xdp_md *ctx, const int cas)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	/* Zeroed: parse leaves fields unset on some paths, and clang then reads
	 * a spill slot no path wrote, which 6.1's verifier refuses for shield
	 * ("invalid read from stack R10 off=-168"; 6.18 accepts it). */
	struct packet pkt = {};
	__u32 zero = 0;
	int reason;

	reason = parse(data, data_end, &pkt);
	if (reason != REASON_OK)
		return account(len, VERDICT_PASS, reason, PROTO_OTHER);

	void *inner = bpf_map_lookup_elem(&config_map, &zero);
	if (!inner)
		return account(len, VERDICT_PASS, REASON_OK, pkt.proto); /* not configured yet */
	struct config *cfg = bpf_map_lookup_elem(inner, &zero);
	if (!cfg)
		return account(len, VERDICT_PASS, REASON_OK, pkt.proto);
	__u32 flags = cfg->flags;
	__u32 limited = flags & CONFIG_DRY_RUN ? VERDICT_PASS : VERDICT_DROP;

	/* An IPv4-mapped IPv6 source is forged: no host puts one on the wire
	 * (Linux's IPv6 input drops it, ip6_rcv_core), and judging it as the
	 * IPv4 address would let anyone spend that address's bucket. */
	if (pkt.is_v6 && mapped(&pkt))
		return account(len, VERDICT_DROP, REASON_SPOOFED, pkt.proto);
	if (own(&pkt, cfg))
		return account(len, VERDICT_DROP, REASON_SPOOFED, pkt.proto);

	__u32 rule = NO_RULE;
	int list = listed(&pkt, cfg, flags, &rule);

	if (list) {
		/* The entry that decided counts the packet, on this CPU
		 * (rule_counts); NO_RULE is not counted. */
		if (rule < MAX_RULES) {
			__u32 slot = bpf_get_smp_processor_id() * MAX_RULES + rule;
			__u64 *hits = bpf_map_lookup_elem(&rule_counts, &slot);

			if (hits)
				*hits += 1;
		}
		/* From the wire, the machine's own address is forged. (On
		 * loopback the machine talks to itself: there the service
		 * names no own address.) */
		if (list == LIST_OWN)
			return account(len, VERDICT_DROP, REASON_SPOOFED, pkt.proto);
		if (list == LIST_ALLOW)
			return account(len, VERDICT_PASS, REASON_ALLOW, pkt.proto);
		return account(len, VERDICT_DROP, REASON_DENY, pkt.proto);
	}

	int class = class_of(&pkt, cfg);
	const struct limit *lim = class == CLASS_PROTECTED ? &cfg->source : &cfg->unprotected;
	__u32 ok = class == CLASS_PROTECTED ? REASON_OK : REASON_UNPROTECTED;
	__u32 over = class == CLASS_PROTECTED ? REASON_LIMIT : REASON_UNPROTECTED;
	struct src_key key __attribute__((aligned(8)));
	/* The aggregate limit applies: a protected packet, some limit set. */
	__u32 agg_gate = class == CLASS_PROTECTED && (flags & CONFIG_AGGREGATE);
	__u32 agg_key = pkt.proto | (__u32)pkt.has_port << 8 | (__u32)pkt.dport << 16;

	source_key(&pkt, cfg, &key);
	__u64 now = now_ns();
	__u64 h = hash_of(&key);
	__u32 slot = slot_of(h);
	__u32 si = set_of(h);
	struct source_set *set = 0;
	struct source *src = 0;

	if (cas) {
		__u64 *w = presence_word(cfg->filter, slot);

		if (!w || (*w >> (slot & 63)) & 1)
			set = bpf_map_lookup_elem(&sources, &si);
	} else {
		set = bpf_map_lookup_elem(&sources, &si);
	}
	if (set)
		src = find(set, &key);
	if (src) {
		struct bucket *b = class == CLASS_PROTECTED ? &src->bucket : &src->unprotected;

		/* Under an aggregate limit a source that keeps its own bucket
		 * below half full (one sending at or over its rate: a flood's
		 * source) is shed with the strangers; one well within its rate
		 * is served first. The source's counts are statistics: plain
		 * increments, not locked ones (a locked add is ~5 ns here, and
		 * this line is written anyway). Two CPUs adding at once may
		 * lose one; the limits are kept by the bucket's atomic debit. */
		int t = take_level(b, lim, now, cas);

		if (t && (cas ? aggregate_cas(agg_key, now, t >> 1, agg_gate) : aggregate_compat(agg_key, now, t >> 1, agg_gate))) {
			src->passed += 1;
			return account(len, VERDICT_PASS, ok, pkt.proto);
		}
		src->dropped += 1;
		return account(len, limited, over, pkt.proto);
	}

	/* A stranger: admitted only while its class's admission bucket has a
	 * token, so a forged flood neither fills the table nor gets a burst per
	 * forged address. Refused strangers are not inserted. */
	if (!(cas ? aggregate_cas(agg_key, now, 1, agg_gate) : aggregate_compat(agg_key, now, 1, agg_gate)))
		return account(len, limited, REASON_ADMISSION, pkt.proto);
	__u32 idx = class;
	struct bucket *adm = bpf_map_lookup_elem(&admission, &idx);
	const struct limit *alim = class == CLASS_PROTECTED ? &cfg->admission : &cfg->unprotected_admission;
	if (!adm || !take(adm, alim, now, cas))
		return account(len, limited, REASON_ADMISSION, pkt.proto);

	if (!set)
		set = bpf_map_lookup_elem(&sources, &si);
	if (!set || !insert(set, &key, cfg, now, class))
		return account(len, VERDICT_PASS, ok, pkt.proto); /* admitted, not tracked */
	/* After the insertion: a walk of the table that misses it began
	 * after it, so after the filter it refills was cleared
	 * (Shield.RefreshFilter), and these bits stay. */
	if (cas) {
		__u64 bit = 1ULL << (slot & 63);

#pragma unroll
		for (__u32 f = 0; f < 2; f++) {
			__u64 *w = presence_word(f, slot);

			if (w)
				__sync_fetch_and_or(w, bit);
		}
	}
	return account(len, VERDICT_PASS, ok, pkt.proto);
}

/* next holds the program a passed packet goes on to (the XDP balancer,
 * xdplb.c) when the service configures one; left empty, the tail call
 * falls through and the packet passes. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} next SEC(".maps");

static __always_inline int then(struct xdp_md *ctx, int ret)
{
	int action = ret & 0xff;

	if (action == XDP_PASS)
		bpf_tail_call(ctx, &next, 0);
	else
		capture(ctx, ret);
	return action;
}

/* shield is the program to attach (kernel 5.12+: cmpxchg refills). */
SEC("xdp")
int shield(struct xdp_md *ctx)
{
	return then(ctx, run(ctx, 1));
}

/* shield_compat is shield for kernels without BPF_CMPXCHG (5.10, 5.11):
 * the loader loads it in shield's place there. See refill(). */
SEC("xdp")
int shield_compat(struct xdp_md *ctx)
{
	return then(ctx, run(ctx, 0));
}

/* clock_probe records jiffies and ktime together so the loader can measure
 * CONFIG_HZ (the jiffies clock's resolution) by running it twice. */
SEC("xdp")
int clock_probe(struct xdp_md *ctx)
{
	probe_jiffies = bpf_jiffies64();
	probe_ktime_ns = bpf_ktime_get_ns();
	return XDP_PASS;
}
