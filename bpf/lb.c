//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * lb: the socket-level L4 balancer of xdpshield (cgroup sock-addr family).
 *
 * A process in the attached cgroup v2 directory connects (or sends a datagram)
 * to a service's virtual address (VIP, port, protocol); connect4/6 and
 * sendmsg4/6 pick a backend and rewrite the destination before a packet
 * exists, so the kernel builds packets for the backend and no per-packet NAT
 * or conntrack is involved. A socket keeps what it chose (backend, VIP,
 * service; up to four services a socket) in state of its own: socket
 * storage (SK_STORAGE) where the kernel lets these programs use it, else an
 * LRU keyed by socket cookie that sock_release empties. connect4/6 and
 * sendmsg4/6 give a socket the backend it chose before, so an unconnected
 * UDP socket's datagrams stay on one backend; recvmsg4/6 and
 * getpeername4/6 report the VIP back to the application.
 *
 * Backends are chosen through a per-service table of MAX_TABLE backend ids
 * that user space computes and swaps in whole (array of maps): random mode
 * indexes it with bpf_get_prandom_u32() for TCP and a hash of the socket
 * cookie for UDP (as Cilium's sock_select_slot); Maglev mode with a hash of
 * the socket's bound source (address, port), or of its cookie when unbound.
 * A draining backend is simply absent from the table: sockets that chose it
 * keep it (their state names it), new ones cannot pick it. A service
 * without a table has no usable backend: the connect()/sendmsg() fails (ECONNREFUSED on 5.18+, through bpf_set_retval;
 * EPERM, the hook's only refusal, before).
 *
 * Loads on 5.10 and later: connect4/6 (4.17), sendmsg4/6 (4.18), recvmsg4/6
 * (5.2), ctx->sk in sock_addr programs (5.3), getpeername4/6 (5.8),
 * sock_release (5.9), bpf_get_socket_cookie in cgroup/sock programs (5.10).
 * bpf_set_retval (5.18) is behind a load-time switch: the loader loads with
 * it and, when the verifier refuses the helper, again without.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/socket.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#define ECONNREFUSED 111

#define SYS_REJECT 0  /* the syscall fails (EPERM unless a retval was set) */
#define SYS_PROCEED 1 /* the syscall goes on, with what the program rewrote */

/* Load-time switch: bpf_set_retval exists (5.18+), so a refused connect()
 * reports ECONNREFUSED instead of the hook's EPERM. */
const volatile __u8 have_set_retval = 0;

/* Outcomes of connect4/6 and sendmsg4/6. The Go side mirrors the names
 * (lb/counters.go); the order is part of the counters map layout. */
enum outcome {
	OUTCOME_TRANSLATED = 0,  /* to a service: rewritten to a backend */
	OUTCOME_NO_BACKEND = 1,  /* to a service with no usable backend: refused */
	OUTCOME_NOT_SERVICE = 2, /* not to a VIP/port/protocol: untouched (service 0) */
	OUTCOME_DENIED = 3,      /* to a service, from outside its source ranges: refused */
	OUTCOME_MAX,
};

#define MODE_RANDOM 0
#define MODE_MAGLEV 1

/* An address of either family: IPv6, or IPv4 mapped as ::ffff:a.b.c.d
 * (words in network byte order), so one key type serves both. */
struct addr {
	__u32 w[4];
};

struct svc_key {
	struct addr addr; /* the VIP */
	__u16 port;       /* network byte order */
	__u8 proto;       /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 _pad;
};

/* svc.flags */
#define SVC_F_RANGES 1 /* only clients in the service's source ranges */

struct svc {
	__u32 id;    /* 1..MAX_SERVICES-1: the tables slot and counters row */
	__u8 mode;   /* MODE_RANDOM or MODE_MAGLEV */
	__u8 flags;  /* SVC_F_* */
	__u8 _pad[2];
	__u32 affinity_ms; /* session affinity by client: idle timeout; 0: off */
};

struct backend {
	struct addr addr;
	__u16 port;     /* network byte order */
	__u8 owner;     /* user space's: the service id, for a restart */
	__u8 draining;  /* no new sockets (affinity included) */
	__u16 weight;   /* user space's: the table holds it (restart reads it) */
	__u16 _pad;
};

/* Services by (VIP, port, protocol). */
#define MAX_SERVICES 256
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVICES);
	__type(key, struct svc_key);
	__type(value, struct svc);
} services SEC(".maps");

/* Backends by id (allocated by user space, unique across services). */
#define MAX_BACKENDS 65536
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* Per service id: the choice table, MAX_TABLE backend ids (a prime, as Maglev
 * wants). User space builds a new inner map and swaps it in, so a connect()
 * sees the old or the new table, never half of each. No entry: no usable
 * backend. */
#define MAX_TABLE 16381
struct table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TABLE);
	__type(key, __u32);
	__type(value, __u32); /* backend id */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, MAX_SERVICES);
	__type(key, __u32); /* service id */
	__array(values, struct table);
} tables SEC(".maps");

/* Source ranges: the client prefixes a service with SVC_F_RANGES admits
 * (Kubernetes' loadBalancerSourceRanges; Cilium's lb{4,6}_source_range). The
 * client is the socket's source address as the hook sees it: the one it was
 * bound to, else the unspecified address (the kernel picks the source after
 * the hook, by route), so an unbound socket is admitted only by a range
 * holding 0.0.0.0 (or ::). Longest prefix match on (service id, address):
 * prefixlen counts the id's 32 bits and then the address's 128 (IPv4 as
 * ::ffff:a.b.c.d, so an IPv4 /n is 32 + 96 + n). */
struct range_key {
	__u32 prefixlen;
	__u32 svc_id;     /* big endian, so it is matched as a whole first */
	struct addr addr; /* the client prefix */
};

#define MAX_RANGES 16384
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_RANGES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct range_key);
	__type(value, __u8); /* 1 */
} ranges SEC(".maps");

/* Session affinity (Cilium's lb{4,6}_affinity map): per service, the
 * backend a client was last given and when, so that its next socket within
 * the service's timeout gets the same backend. The client is the socket's
 * bound source address, else its network namespace (the source of an
 * unbound socket is chosen after the hook; Cilium's socket LB keys on the
 * netns cookie for the same reason). An LRU: the oldest clients go first. */
struct aff_key {
	struct addr client; /* bound source address, or zero */
	__u64 netns;        /* netns cookie when unbound, else 0 */
	__u32 svc_id;
	__u32 _pad;
};

struct aff_val {
	__u64 last_ns; /* bpf_ktime_get_ns() of the last use */
	__u32 be_id;
	__u32 _pad;
};

#define MAX_AFFINITY 65536
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_AFFINITY);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} affinity SEC(".maps");

/* One translation a socket made: the backend it talks to and the VIP it
 * meant, so connect4/6 and sendmsg4/6 choose the same backend again for the
 * same service (per socket, not per datagram), and recvmsg4/6 and
 * getpeername4/6 report the VIP back. */
struct xlat {
	struct addr backend; /* the address the socket really talks to */
	struct addr vip;     /* the address it asked for */
	__u16 be_port;       /* network byte order */
	__u16 vip_port;      /* network byte order */
	__u32 svc_id;        /* 0: a free slot */
	__u32 be_id;         /* the backends map's key: gone = choose again */
	__u32 _pad;
};

/* What the balancer keeps per socket: a few translations (an unconnected UDP
 * socket may talk to several services), overwritten oldest first when a
 * socket uses more (counted: STATE_EVICTED). */
#define SOCK_SLOTS 4
struct sock_lb {
	struct xlat x[SOCK_SLOTS];
	__u32 next; /* the slot a full socket overwrites next */
	__u32 _pad;
};

/* Load-time switch: bpf_sk_storage_get is allowed in cgroup sock_addr and
 * cgroup/sock programs (probed by the loader): the state lives on the socket
 * (sock_state) and goes with it, whatever happened to its destination. Else
 * the fallback: an LRU keyed by socket cookie (reverse), deleted by cookie in
 * sock_release; an LRU can evict a live socket's state when full. */
const volatile __u8 have_sk_storage = 0;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_lb);
} sock_state SEC(".maps");

/* The fallback's per-socket state. An LRU: the loader sets max_entries. */
#define MAX_REVERSE 65536
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_REVERSE);
	__type(key, __u64); /* socket cookie */
	__type(value, struct sock_lb);
} reverse SEC(".maps");

/* Per backend id: the balanced sockets whose state names it, so that
 * removing a backend can say how many sockets were left open on it where
 * they cannot be terminated (lb_destroy.c). User space creates the entry
 * with the backend and deletes it after the backend; the programs only add.
 * With the lru fallback an evicted state's socket is never subtracted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);   /* backend id */
	__type(value, __s64); /* sockets */
} be_sockets SEC(".maps");

static __always_inline void be_add(__u32 id, __s64 d)
{
	__s64 *c = bpf_map_lookup_elem(&be_sockets, &id);

	if (c)
		__sync_fetch_and_add(c, d);
}

/* Per-socket state events, global. The Go side mirrors the names
 * (lb/counters.go); live states = created - released. */
enum state_event {
	STATE_CREATED = 0,  /* a socket got state (its first translation) */
	STATE_RELEASED = 1, /* a socket with state was released */
	STATE_EVICTED = 2,  /* a translation was overwritten: socket used > SOCK_SLOTS */
	STATE_MISS = 3,     /* no state could be stored: no VIP reported back */
	STATE_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATE_MAX);
	__type(key, __u32);
	__type(value, __u64); /* events */
} state_counters SEC(".maps");

/* Counters: index service id * OUTCOME_MAX + outcome (id 0: not a service). */
#define MAX_COUNTERS (MAX_SERVICES * OUTCOME_MAX)
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_COUNTERS);
	__type(key, __u32);
	__type(value, __u64); /* connect()/sendmsg() calls */
} counters SEC(".maps");

/* Per-CPU, and yet atomic: since 5.7 cgroup programs run with migration
 * disabled but may be preempted, so two tasks on one CPU can interleave a
 * plain read-modify-write and lose a count. */
static __always_inline void count(__u32 id, __u32 outcome)
{
	__u32 idx = id * OUTCOME_MAX + outcome;
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline void count_state(__u32 ev)
{
	__u64 *c = bpf_map_lookup_elem(&state_counters, &ev);

	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline __u64 mix64(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* The Maglev key of a socket: its bound source (address, port) when it has
 * one, so a client that binds gets the same backend for the same source, else
 * its cookie (a new choice per socket, stable for the socket's life). */
static __always_inline __u64 flow_hash(struct bpf_sock_addr *ctx, int v6, __u32 id)
{
	struct bpf_sock *sk = ctx->sk;
	__u64 h = mix64(id);

	if (!sk || sk->src_port == 0)
		return mix64(h ^ bpf_get_socket_cookie(ctx));
	if (v6) {
		h = mix64(h ^ (((__u64)sk->src_ip6[0] << 32) | sk->src_ip6[1]));
		h = mix64(h ^ (((__u64)sk->src_ip6[2] << 32) | sk->src_ip6[3]));
	} else {
		h = mix64(h ^ sk->src_ip4);
	}
	return mix64(h ^ sk->src_port);
}

static __always_inline int same_addr(const struct addr *a, const struct addr *b)
{
	return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[2] == b->w[2] && a->w[3] == b->w[3];
}

/* The socket's state, if it has some; with create, made when missing
 * (counted). NULL: none (or none could be made). */
static __always_inline struct sock_lb *state_of(struct bpf_sock_addr *ctx, int create)
{
	struct sock_lb *st;

	if (have_sk_storage) {
		struct bpf_sock *sk = ctx->sk;

		if (!sk)
			return NULL;
		st = bpf_sk_storage_get(&sock_state, sk, 0, 0);
		if (st || !create)
			return st;
		st = bpf_sk_storage_get(&sock_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	} else {
		__u64 cookie = bpf_get_socket_cookie(ctx);

		st = bpf_map_lookup_elem(&reverse, &cookie);
		if (st || !create)
			return st;
		struct sock_lb zero = {};
		/* A full LRU evicts another socket's state to make room: the
		 * fallback's weakness (sk_storage has none). */
		if (bpf_map_update_elem(&reverse, &cookie, &zero, BPF_NOEXIST) == 0)
			st = bpf_map_lookup_elem(&reverse, &cookie);
	}
	if (st)
		count_state(STATE_CREATED);
	else
		count_state(STATE_MISS);
	return st;
}

/* The slot of service id (at VIP key) in st, or -1. */
static __always_inline int slot_of(struct sock_lb *st, __u32 id, const struct svc_key *key)
{
#pragma unroll
	for (int i = 0; i < SOCK_SLOTS; i++) {
		struct xlat *x = &st->x[i];

		if (x->svc_id == id && x->vip_port == key->port && same_addr(&x->vip, &key->addr))
			return i;
	}
	return -1;
}

/* Where a new translation goes: a free slot, else the oldest (evicted). */
static __always_inline int free_slot(struct sock_lb *st)
{
#pragma unroll
	for (int i = 0; i < SOCK_SLOTS; i++) {
		if (st->x[i].svc_id == 0)
			return i;
	}
	count_state(STATE_EVICTED);
	int i = st->next & (SOCK_SLOTS - 1);
	st->next = i + 1;
	return i;
}

static __always_inline int refuse(void)
{
	if (have_set_retval)
		bpf_set_retval(-ECONNREFUSED);
	return SYS_REJECT;
}

static __always_inline void read_dst(struct bpf_sock_addr *ctx, int v6, struct addr *a)
{
	if (v6) {
		a->w[0] = ctx->user_ip6[0];
		a->w[1] = ctx->user_ip6[1];
		a->w[2] = ctx->user_ip6[2];
		a->w[3] = ctx->user_ip6[3];
	} else {
		a->w[0] = 0;
		a->w[1] = 0;
		a->w[2] = bpf_htonl(0xffff);
		a->w[3] = ctx->user_ip4;
	}
}

/* 4-byte stores only: narrower or wider ones to user_ip6 are refused on
 * older kernels. */
static __always_inline void write_dst(struct bpf_sock_addr *ctx, int v6, const struct addr *a, __u16 port)
{
	if (v6) {
		ctx->user_ip6[0] = a->w[0];
		ctx->user_ip6[1] = a->w[1];
		ctx->user_ip6[2] = a->w[2];
		ctx->user_ip6[3] = a->w[3];
	} else {
		ctx->user_ip4 = a->w[3];
	}
	ctx->user_port = port;
}

/* Whether the socket's source address is in service id's ranges. */
static __always_inline int in_ranges(struct bpf_sock_addr *ctx, int v6, __u32 id)
{
	struct bpf_sock *sk = ctx->sk;
	struct range_key k = {.prefixlen = 32 + 128, .svc_id = bpf_htonl(id)};

	if (sk) {
		if (v6) {
			k.addr.w[0] = sk->src_ip6[0];
			k.addr.w[1] = sk->src_ip6[1];
			k.addr.w[2] = sk->src_ip6[2];
			k.addr.w[3] = sk->src_ip6[3];
		} else {
			k.addr.w[2] = bpf_htonl(0xffff);
			k.addr.w[3] = sk->src_ip4;
		}
	} else if (!v6) {
		k.addr.w[2] = bpf_htonl(0xffff);
	}
	return bpf_map_lookup_elem(&ranges, &k) != 0;
}

static __always_inline void aff_key_of(struct bpf_sock_addr *ctx, int v6, __u32 id, struct aff_key *k)
{
	struct bpf_sock *sk = ctx->sk;

	k->svc_id = id;
	if (sk) {
		if (v6) {
			k->client.w[0] = sk->src_ip6[0];
			k->client.w[1] = sk->src_ip6[1];
			k->client.w[2] = sk->src_ip6[2];
			k->client.w[3] = sk->src_ip6[3];
		} else if (sk->src_ip4) {
			k->client.w[2] = bpf_htonl(0xffff);
			k->client.w[3] = sk->src_ip4;
		}
	}
	if (!k->client.w[0] && !k->client.w[1] && !k->client.w[2] && !k->client.w[3])
		k->netns = bpf_get_netns_cookie(ctx);
}

/* connect4/6 and sendmsg4/6: translate a VIP to a backend. The choice is
 * per socket: a socket that chose a backend of this service before (at
 * connect, or an earlier datagram) gets it again while the backend exists
 * (draining included: the socket is already talking to it). A new choice is
 * Maglev's (bound source, else cookie), or random's: bpf_get_prandom_u32 for
 * TCP (one choice per connect anyway), the socket cookie for UDP so that a
 * socket whose state could not be stored still stays on one backend (as
 * Cilium's sock_select_slot does). */
static __always_inline int translate(struct bpf_sock_addr *ctx, int v6)
{
	struct svc_key key = {};
	struct svc *svc;
	struct backend *be = 0;
	struct sock_lb *st;
	void *table;
	__u32 slot, *bid, be_id = 0;
	int i = -1;

	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return SYS_PROCEED;
	read_dst(ctx, v6, &key.addr);
	key.port = (__u16)ctx->user_port;
	key.proto = ctx->protocol;
	svc = bpf_map_lookup_elem(&services, &key);
	if (!svc) {
		count(0, OUTCOME_NOT_SERVICE);
		return SYS_PROCEED;
	}
	__u32 id = svc->id;
	if (id >= MAX_SERVICES)
		return SYS_PROCEED;
	if ((svc->flags & SVC_F_RANGES) && !in_ranges(ctx, v6, id)) {
		/* Refused, not passed on untranslated: the VIP itself is
		 * nobody's address to reach (Cilium drops these too). */
		count(id, OUTCOME_DENIED);
		return refuse();
	}

	st = state_of(ctx, 0);
	if (st) {
		i = slot_of(st, id, &key);
		if (i >= 0) {
			struct xlat *x = &st->x[i & (SOCK_SLOTS - 1)];

			be_id = x->be_id;
			be = bpf_map_lookup_elem(&backends, &be_id);
			if (be && (be->port != x->be_port || !same_addr(&be->addr, &x->backend)))
				be = 0;
			if (be)
				goto chosen;
		}
	}

	struct aff_key ak = {};
	struct aff_val *av;
	__u64 now = 0;

	if (svc->affinity_ms) {
		aff_key_of(ctx, v6, id, &ak);
		now = bpf_ktime_get_ns();
		av = bpf_map_lookup_elem(&affinity, &ak);
		if (av && now - av->last_ns < (__u64)svc->affinity_ms * 1000000) {
			be_id = av->be_id;
			be = bpf_map_lookup_elem(&backends, &be_id);
			if (be && !be->draining) {
				av->last_ns = now;
				goto keep;
			}
		}
	}

	table = bpf_map_lookup_elem(&tables, &id);
	if (!table)
		goto none;
	if (svc->mode == MODE_MAGLEV)
		slot = flow_hash(ctx, v6, id) % MAX_TABLE;
	else if (ctx->protocol == IPPROTO_UDP)
		slot = mix64(mix64(id) ^ bpf_get_socket_cookie(ctx)) % MAX_TABLE;
	else
		slot = bpf_get_prandom_u32() % MAX_TABLE;
	bid = bpf_map_lookup_elem(table, &slot);
	if (!bid)
		goto none;
	be_id = *bid;
	be = bpf_map_lookup_elem(&backends, &be_id);
	if (!be)
		goto none;
	if (svc->affinity_ms) {
		struct aff_val nv = {.last_ns = now, .be_id = be_id};

		bpf_map_update_elem(&affinity, &ak, &nv, BPF_ANY);
	}

keep:
	if (!st)
		st = state_of(ctx, 1);
	if (st) {
		if (i < 0)
			i = free_slot(st);
		struct xlat *x = &st->x[i & (SOCK_SLOTS - 1)];

		if (x->svc_id == 0 || x->be_id != be_id) {
			if (x->svc_id)
				be_add(x->be_id, -1);
			be_add(be_id, 1);
		}
		x->backend = be->addr;
		x->be_port = be->port;
		x->vip = key.addr;
		x->vip_port = key.port;
		x->be_id = be_id;
		x->svc_id = id;
	}
chosen:
	write_dst(ctx, v6, &be->addr, be->port);
	count(id, OUTCOME_TRANSLATED);
	return SYS_PROCEED;
none:
	count(id, OUTCOME_NO_BACKEND);
	return refuse();
}

/* recvmsg4/6 and getpeername4/6: report the VIP for a translated peer. */
static __always_inline int reverse_translate(struct bpf_sock_addr *ctx, int v6)
{
	struct sock_lb *st = state_of(ctx, 0);
	struct addr peer;
	__u16 port = (__u16)ctx->user_port;

	if (!st)
		return SYS_PROCEED;
	read_dst(ctx, v6, &peer);
#pragma unroll
	for (int i = 0; i < SOCK_SLOTS; i++) {
		struct xlat *x = &st->x[i];

		if (x->svc_id != 0 && x->be_port == port && same_addr(&x->backend, &peer)) {
			write_dst(ctx, v6, &x->vip, x->vip_port);
			break;
		}
	}
	return SYS_PROCEED;
}

SEC("cgroup/connect4")
int lb_connect4(struct bpf_sock_addr *ctx) { return translate(ctx, 0); }

SEC("cgroup/connect6")
int lb_connect6(struct bpf_sock_addr *ctx) { return translate(ctx, 1); }

SEC("cgroup/sendmsg4")
int lb_sendmsg4(struct bpf_sock_addr *ctx) { return translate(ctx, 0); }

SEC("cgroup/sendmsg6")
int lb_sendmsg6(struct bpf_sock_addr *ctx) { return translate(ctx, 1); }

SEC("cgroup/recvmsg4")
int lb_recvmsg4(struct bpf_sock_addr *ctx) { return reverse_translate(ctx, 0); }

SEC("cgroup/recvmsg6")
int lb_recvmsg6(struct bpf_sock_addr *ctx) { return reverse_translate(ctx, 1); }

SEC("cgroup/getpeername4")
int lb_getpeername4(struct bpf_sock_addr *ctx) { return reverse_translate(ctx, 0); }

SEC("cgroup/getpeername6")
int lb_getpeername6(struct bpf_sock_addr *ctx) { return reverse_translate(ctx, 1); }

/* sock_release: the socket is going. Its sk_storage goes with it (counted
 * here); the fallback's LRU entry is deleted by cookie, whatever the socket's
 * destination became (refused, unreachable, disconnected, never connected). */
static __always_inline void release_slots(struct sock_lb *st)
{
#pragma unroll
	for (int i = 0; i < SOCK_SLOTS; i++) {
		if (st->x[i].svc_id)
			be_add(st->x[i].be_id, -1);
	}
}

SEC("cgroup/sock_release")
int lb_sock_release(struct bpf_sock *sk)
{
	struct sock_lb *st;

	if (have_sk_storage) {
		st = bpf_sk_storage_get(&sock_state, sk, 0, 0);
		if (st) {
			release_slots(st);
			count_state(STATE_RELEASED);
		}
		return SYS_PROCEED;
	}
	__u64 cookie = bpf_get_socket_cookie(sk);

	st = bpf_map_lookup_elem(&reverse, &cookie);
	if (st)
		release_slots(st);
	if (bpf_map_delete_elem(&reverse, &cookie) == 0)
		count_state(STATE_RELEASED);
	return SYS_PROCEED;
}
