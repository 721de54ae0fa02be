//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * walk: walks of the sources table inside the kernel, the references
 * BenchmarkTop (shield/top_bench_test.go) measures the service's walk of
 * the table's memory mapping against. Nothing in the service loads them.
 *
 * walk_iter is a map-element iterator (kernel 5.9+): attached to the table
 * (link.AttachIter), each read of the link hands user space every source as
 * a struct walk_rec, what Top ranks and judges; with hand_over cleared it
 * only sums the counts, as walk_visit does (what filtering or ranking
 * inside the iterator could save at most). walk_visit, run once with
 * BPF_PROG_TEST_RUN (syscall programs: 5.14+; bpf_for_each_map_elem: 5.13+),
 * visits every entry and sums its counts, nothing more: the floor of any
 * walk, what reading each element once costs, however little is done with
 * it. Both take the table through MapReplacements (the `sources` declared
 * here stands for shield.c's).
 *
 * The layouts of src_key, source and source_set repeat shield.c's;
 * TestWalkLayout (bpf/walk_test.go) holds them to it. The table is an array
 * of sets: each element visited is a set, and only its used ways count.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL"; /* bpf_seq_write is GPL-only */

struct seq_file;

/* The context of an iter/bpf_map_elem program (kernel's bpf_iter.h, stable
 * since 5.9): read by offset, no CO-RE needed. */
struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__bpf_map_elem {
	struct bpf_iter_meta *meta;
	void *map;
	void *key;   /* NULL on the last call, after the last entry */
	void *value; /* NULL on the last call */
};

/* As in shield.c. */
struct src_key {
	__u8 addr[16]; /* IPv6, or IPv4 mapped as ::ffff:a.b.c.d */
};

struct bucket {
	__u64 last_ns; /* as in shield.c */
	__s64 credit;  /* as in shield.c */
};

#define SOURCE_USED (1ULL << 63) /* as in shield.c */

struct source {
	struct src_key key;        /* as in shield.c */
	struct bucket bucket;      /* as in shield.c */
	struct bucket unprotected; /* as in shield.c */
	__u64 passed;              /* SOURCE_USED | packets passed */
	__u64 dropped;             /* packets dropped */
};

#define WAYS 4 /* as in shield.c */
struct source_set {
	struct source way[WAYS];
};

/* One source as walk_iter writes it: a used way. */
struct walk_rec {
	struct source src;
};

/* clang emits BTF only for types a global reaches (bpf2go's -type). */
const struct walk_rec *unused_walk_rec __attribute__((unused));

/* Stands for shield.c's table (MapReplacements); the loader sets its size. */
#define MAX_SETS ((1 << 20) / WAYS)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SETS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct source_set);
} sources SEC(".maps");

/* What a walk saw, read after it (each program loads on its own, with its
 * own copy). */
__u64 seen_entries = 0; /* entries visited */
__u64 seen_passed = 0;  /* the sum of their passed */
__u64 seen_dropped = 0; /* the sum of their dropped */

/* walk_iter: hand every entry over (1), or only sum the counts (0). */
const volatile __u8 hand_over = 1;

SEC("iter/bpf_map_elem")
int walk_iter(struct bpf_iter__bpf_map_elem *ctx)
{
	struct source_set *set = ctx->value;

	if (!ctx->key || !set)
		return 0;
	if (ctx->meta->seq_num == 0) {
		seen_entries = 0;
		seen_passed = 0;
		seen_dropped = 0;
	}
#pragma unroll
	for (int i = 0; i < WAYS; i++) {
		struct source *e = &set->way[i];

		if (!(e->passed & SOURCE_USED))
			continue;
		seen_entries++; /* one walk at a time: the benchmark's */
		seen_passed += e->passed & ~SOURCE_USED;
		seen_dropped += e->dropped;
		if (hand_over)
			bpf_seq_write(ctx->meta->seq, e, sizeof(*e));
	}
	return 0;
}

struct visit_sums {
	__u64 entries;
	__u64 passed;
	__u64 dropped;
};

static long visit_one(void *map, __u32 *key, struct source_set *set, struct visit_sums *s)
{
#pragma unroll
	for (int i = 0; i < WAYS; i++) {
		struct source *e = &set->way[i];

		if (!(e->passed & SOURCE_USED))
			continue;
		s->entries++;
		s->passed += e->passed & ~SOURCE_USED;
		s->dropped += e->dropped;
	}
	return 0;
}

SEC("syscall")
int walk_visit(void *ctx)
{
	struct visit_sums s = {};

	bpf_for_each_map_elem(&sources, visit_one, &s, 0);
	seen_entries = s.entries;
	seen_passed = s.passed;
	seen_dropped = s.dropped;
	return 0;
}
