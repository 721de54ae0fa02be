//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * lb_destroy: socket iterators (iter/tcp, iter/udp) that terminate the
 * balanced sockets still talking to removed backends, with the
 * bpf_sock_destroy kfunc (6.5+), as Cilium's socket LB does. User space
 * (lb/destroy.go) names the removed backends' ids in destroy_targets, runs
 * each iterator once in the network namespace of the balanced processes,
 * and empties the map. A socket is destroyed only when its balancer state
 * (sock_state, shared with lb.c's programs: only with socket storage)
 * names one of those backends: a socket that reached the backend's address
 * directly is not the balancer's and stays. TCP sockets get ECONNABORTED,
 * UDP ones ECONNABORTED on their next call.
 *
 * Needs: iterator programs (5.8 for tcp/udp), bpf_sk_storage_get from them
 * (5.11), bpf_sock_destroy (6.5). The loader probes by loading and running
 * these programs; where any is refused, removed backends' sockets are left
 * open (counted).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* The kernel's types, as far as these programs read them (CO-RE: fields
 * are found by name in the running kernel's BTF). */
struct sock_common {
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct tcp_sock;
struct udp_sock;

struct bpf_iter_meta;

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

/* lb.c's per-socket state, the same layout (the loader hands this program
 * lb.c's sock_state map). */
struct addr {
	__u32 w[4];
};

struct xlat {
	struct addr backend;
	struct addr vip;
	__u16 be_port;
	__u16 vip_port;
	__u32 svc_id;
	__u32 be_id;
	__u32 _pad;
};

#define SOCK_SLOTS 4
struct sock_lb {
	struct xlat x[SOCK_SLOTS];
	__u32 next;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_lb);
} sock_state SEC(".maps");

/* The removed backends' ids. */
#define MAX_TARGETS 65536
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);  /* backend id */
	__type(value, __u8); /* 1 */
} destroy_targets SEC(".maps");

/* [0]: sockets destroyed; [1]: bpf_sock_destroy refused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} destroy_counts SEC(".maps");

static __always_inline void add(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&destroy_counts, &i);

	if (c)
		__sync_fetch_and_add(c, 1);
}

/* Whether the socket's balancer state names a removed backend. */
static __always_inline int targeted(struct sock *sk)
{
	struct sock_lb *st = bpf_sk_storage_get(&sock_state, sk, 0, 0);

	if (!st)
		return 0;
#pragma unroll
	for (int i = 0; i < SOCK_SLOTS; i++) {
		__u32 id = st->x[i].be_id;

		if (st->x[i].svc_id && bpf_map_lookup_elem(&destroy_targets, &id))
			return 1;
	}
	return 0;
}

static __always_inline void destroy(struct sock_common *skc)
{
	add(bpf_sock_destroy(skc) == 0 ? 0 : 1);
}

SEC("iter/tcp")
int lb_destroy_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;

	/* Reading a field also gives the kfunc's parameter its full type in
	 * the object's BTF (a type only pointed to is emitted as a forward
	 * declaration, which the loader cannot match with the kernel's). */
	if (!skc || (skc->skc_family != 2 && skc->skc_family != 10))
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || !targeted((struct sock *)tp))
		return 0;
	destroy(skc);
	return 0;
}

SEC("iter/udp")
int lb_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *up = ctx->udp_sk;

	if (!up || !targeted((struct sock *)up))
		return 0;
	destroy((struct sock_common *)up);
	return 0;
}
