//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdplb: the XDP layer-4 balancer of xdpshield (north-south, Katran's
 * design: facebookincubator/katran, katran/lib/bpf/balancer_kern-tpl.h).
 *
 * One packet: Ethernet -> IPv4/IPv6 -> TCP/UDP destination matched against
 * the virtual services (VIP, port, protocol) -> connection table (an
 * established flow keeps its backend) or else the VIP's Maglev ring ->
 * encapsulation (IPIP for IPv4, IP6IP6 for IPv6) to the backend -> XDP_TX
 * out of the interface the packet came in by, to the configured next hop.
 * The backend decapsulates and answers the client itself (direct server
 * return). ICMP "fragmentation needed" / "packet too big" about a VIP's
 * flow goes to the backend serving that flow. Anything else passes, with
 * its reason counted; nothing is dropped but a VIP's packet with no backend.
 *
 * Composition with the shield: the shield judges first and tail-calls this
 * program for what it passes (shield.c's `next` program array); attached on
 * its own, it balances everything that reaches it.
 *
 * Loads on 5.10: LRU hash with per-CPU LRU lists (4.10), bpf_xdp_adjust_head
 * (4.10), global data (5.2). No helper newer than 4.18.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* linux/icmp.h pulls in libc's socket headers; the ICMP header's first
 * four bytes are all this program reads (RFC 792, RFC 4443). */
struct icmp_head {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 rest; /* unused; next-hop MTU for frag-needed / MTU for too-big */
};

/* IPv6 extension headers the balancer steps over, and how many. */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_DEST 60
#define MAX_EXT6 4

#define IP_DF 0x4000 /* Don't Fragment, in iphdr.frag_off (host order) */
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define ICMPV6_PKT_TOOBIG 2

/* Sizes shared with user space (xdplb/), as enums so bpf2go emits them. */
enum lb_limits {
	MAX_VIPS = 64,      /* virtual services */
	MAX_BACKENDS = 1024, /* backend ids 0..MAX_BACKENDS-1 */
	RING_SIZE = 4093,   /* Maglev table size, prime; >> backends per VIP */
	MAX_CONNS = 65536,  /* connection table entries, all CPUs */
};

/* Why a packet passed, went out or was dropped; index of `stats`. */
enum lb_reason {
	LB_NOT_IP = 0,   /* not IPv4/IPv6 over Ethernet (VLANs included): pass */
	LB_MALFORMED,    /* truncated header: pass */
	LB_FRAGMENT,     /* IPv4 options or fragment; IPv6 fragment, AH, routing in transit or a chain past MAX_EXT6: pass */
	LB_NOT_VIP,      /* no virtual service at the destination: pass */
	LB_TX,           /* balanced: encapsulated and transmitted */
	LB_TOO_BIG,      /* too big to encapsulate within the MTU: pass */
	LB_NO_BACKEND,   /* a VIP's packet with no usable backend: drop */
	LB_ICMP_TX,      /* ICMP too-big for a VIP sent to its flow's backend */
	LB_CONN_HIT,     /* of LB_TX and LB_ICMP_TX: backend from the conn table */
	LB_ADJUST_FAIL,  /* bpf_xdp_adjust_head refused: pass */
	LB_VIP_SOURCE,   /* sent from a VIP's own address and port: pass */
	LB_REASON_MAX,
};

/* vip_key.flags and backend.flags. */
enum lb_flag {
	LB_V6 = 1,      /* the addresses are IPv6 */
	LB_PRESENT = 2, /* backend: a live entry (cleared when removed) */
};

/* A virtual service: destination address, port and protocol. */
struct vip_key {
	__u32 addr[4]; /* IPv4 in addr[0], the rest zero; network order */
	__u16 port;    /* network order */
	__u8 proto;    /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 flags;    /* LB_V6 */
};

struct vip {
	__u32 id;   /* 0..MAX_VIPS-1: its rings, its counters */
	__u32 ring; /* 0 or 1: which of its two rings is live (the swap) */
};

struct backend {
	__u32 addr[4]; /* outer destination; IPv4 in addr[0]; network order */
	__u32 flags;   /* LB_V6, LB_PRESENT */
	__u32 gen;     /* generation of this id: new each time user space gives
			* the id to a (VIP, backend) pair */
};

/* A flow, as the client sent it; the connection table's key and the words
 * the ring hash reads (xdplb.FlowHash is its Go twin). */
struct flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 v6;
	__u16 pad;
};

struct conn {
	__u32 backend; /* backend id chosen when the flow was first seen */
	__u32 vip;     /* the VIP's id, for a table walk */
	__u32 gen;     /* backend.gen when learnt: a reused id is not this */
};

/* Configuration that changes at run time (one entry). */
struct lb_config {
	__u8 next_hop[6]; /* destination MAC of every encapsulated frame */
	__u16 mtu;        /* largest outer IP packet (bytes) on the way out */
	__u32 src4;       /* outer IPv4 source, network order */
	__u32 src6[4];    /* outer IPv6 source, network order */
};

/* Per-CPU packet and byte counts of a VIP or backend. */
struct lb_count {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_VIPS);
	__type(key, struct vip_key);
	__type(value, struct vip);
} vips SEC(".maps");

/* Two rings per VIP, RING_SIZE backend ids each: ring r of VIP v starts at
 * (2v + r) * RING_SIZE. User space fills the idle ring, then flips
 * vip.ring with one update: a packet sees the old table or the new one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_VIPS * 2 * RING_SIZE);
	__type(key, __u32);
	__type(value, __u32);
} rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* The connection table: an LRU hash with an LRU list per CPU
 * (BPF_F_NO_COMMON_LRU), so eviction takes no global lock, while a flow
 * that moves between CPUs still finds its entry. Katran keeps a whole
 * table per CPU (array of maps); one table is simpler to read and to
 * drain, at the cost of shared buckets. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct flow);
	__type(value, struct conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_VIPS);
	__type(key, __u32);
	__type(value, struct lb_count);
} vip_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct lb_count);
} backend_stats SEC(".maps");

/* Keeps the shared types in the BTF for bpf2go (-type). */
struct contract {
	enum lb_limits l;
	enum lb_reason r;
	enum lb_flag f;
} contract_ __attribute__((unused));

static __always_inline int count(__u32 reason, int action)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &reason);

	if (c)
		*c += 1;
	return action;
}

static __always_inline void add(void *map, __u32 idx, __u64 bytes)
{
	struct lb_count *c = bpf_map_lookup_elem(map, &idx);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

/* The ring's hash: murmur3's 32-bit mixing over the flow's ten words, in
 * the order they sit in struct flow (little-endian loads). */
static __always_inline __u32 mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = (k << 15) | (k >> 17);
	k *= 0x1b873593;
	h ^= k;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 flow_hash(const struct flow *f)
{
	const __u32 *w = (const __u32 *)f;
	__u32 h = 0x5eed;

#pragma unroll
	for (int i = 0; i < 10; i++)
		h = mix(h, w[i]);
	h ^= 40;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* The backend for flow at vip: the connection table's, while that backend
 * lives, else the live ring's slot (and the table learns it). Returns the
 * backend id or -1. */
static __always_inline int choose(struct flow *f, const struct vip *v, struct backend **out, int learn)
{
	struct conn *c = bpf_map_lookup_elem(&conns, f);
	struct backend *b;
	__u32 id;

	/* A backend id names one (VIP, backend) pair; an entry learnt for
	 * another VIP id or an earlier generation of the id (removed, then
	 * given to another pair) is stale: the ring decides, else the flow
	 * could go to a backend of another service. */
	if (c && c->vip == v->id) {
		id = c->backend;
		b = bpf_map_lookup_elem(&backends, &id);
		if (b && (b->flags & LB_PRESENT) && (b->flags & LB_V6) == f->v6 && b->gen == c->gen) {
			count(LB_CONN_HIT, 0);
			*out = b;
			return id;
		}
	}
	if (v->id >= MAX_VIPS)
		return -1;
	__u32 slot = (v->id * 2 + (v->ring & 1)) * RING_SIZE + flow_hash(f) % RING_SIZE;
	__u32 *r = bpf_map_lookup_elem(&rings, &slot);
	if (!r)
		return -1;
	id = *r;
	b = bpf_map_lookup_elem(&backends, &id);
	if (!b || !(b->flags & LB_PRESENT) || (b->flags & LB_V6) != f->v6)
		return -1;
	/* ICMP errors do not learn: anyone can forge one, and a forged flow
	 * must not take a connection table entry. */
	if (learn) {
		struct conn nc = {.backend = id, .vip = v->id, .gen = b->gen};
		bpf_map_update_elem(&conns, f, &nc, BPF_ANY);
	}
	*out = b;
	return id;
}

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Encapsulates the IPv4 packet of inner_len bytes in IPIP to b and
 * returns XDP_TX, or a pass with its reason. */
static __always_inline int encap4(struct xdp_md *ctx, const struct lb_config *cfg, const struct backend *b,
				  __u16 inner_len, __u8 tos, __u16 df)
{
	/* The frame's length, not the header's claim: a forged short tot_len
	 * must not carry a frame past the MTU into XDP_TX (dropped unseen). */
	__u32 wire = ctx->data_end - ctx->data - sizeof(struct ethhdr);

	if (wire + sizeof(struct iphdr) > cfg->mtu)
		return count(LB_TOO_BIG, XDP_PASS);
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct iphdr)))
		return count(LB_ADJUST_FAIL, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct ethhdr *old = data + sizeof(struct iphdr);

	if ((void *)(ip + 1) > data_end || (void *)(old + 1) > data_end)
		return count(LB_ADJUST_FAIL, XDP_ABORTED);
	__builtin_memcpy(eth->h_source, old->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, cfg->next_hop, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tos;
	ip->tot_len = bpf_htons(inner_len + sizeof(struct iphdr));
	ip->id = 0;
	ip->frag_off = df; /* the inner DF, as RFC 2003 3.1 requires */
	ip->ttl = 64;
	ip->protocol = IPPROTO_IPIP;
	ip->check = 0;
	ip->saddr = cfg->src4;
	ip->daddr = b->addr[0];

	__u32 s = 0;
	__u16 *w = (__u16 *)ip;
#pragma unroll
	for (int i = 0; i < (int)sizeof(struct iphdr) / 2; i++)
		s += w[i];
	ip->check = csum_fold(s);
	return XDP_TX;
}

/* Encapsulates the IPv6 packet of inner_len bytes (its header included) in
 * IP6IP6 to b and returns XDP_TX, or a pass with its reason. */
static __always_inline int encap6(struct xdp_md *ctx, const struct lb_config *cfg, const struct backend *b,
				  __u16 inner_len, __u8 tc, __u32 hash)
{
	__u32 wire = ctx->data_end - ctx->data - sizeof(struct ethhdr);

	if (wire + sizeof(struct ipv6hdr) > cfg->mtu)
		return count(LB_TOO_BIG, XDP_PASS);
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ipv6hdr)))
		return count(LB_ADJUST_FAIL, XDP_PASS);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + sizeof(*eth);
	struct ethhdr *old = data + sizeof(struct ipv6hdr);

	if ((void *)(ip6 + 1) > data_end || (void *)(old + 1) > data_end)
		return count(LB_ADJUST_FAIL, XDP_ABORTED);
	__builtin_memcpy(eth->h_source, old->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, cfg->next_hop, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);

	/* The flow label carries the flow's hash, so routers on the way keep
	 * a flow on one path (RFC 6438). */
	ip6->version = 6;
	ip6->priority = tc >> 4;
	ip6->flow_lbl[0] = ((tc & 0xf) << 4) | ((hash >> 16) & 0xf);
	ip6->flow_lbl[1] = hash >> 8;
	ip6->flow_lbl[2] = hash;
	ip6->payload_len = bpf_htons(inner_len);
	ip6->nexthdr = IPPROTO_IPV6;
	ip6->hop_limit = 64;
	__builtin_memcpy(&ip6->saddr, cfg->src6, 16);
	__builtin_memcpy(&ip6->daddr, b->addr, 16);
	return XDP_TX;
}

/* Ports at l4 (TCP and UDP both start with them). */
static __always_inline int ports(void *l4, void *data_end, __u16 *sport, __u16 *dport)
{
	__u16 *p = l4;

	if ((void *)(p + 2) > data_end)
		return -1;
	*sport = p[0];
	*dport = p[1];
	return 0;
}

static __always_inline int balance(struct xdp_md *ctx, struct flow *f, struct vip_key *k, __u16 inner_len, __u8 tos,
				   __u16 df, __u32 reason)
{
	__u32 zero = 0;
	struct vip *v = bpf_map_lookup_elem(&vips, k);

	if (!v)
		return count(LB_NOT_VIP, XDP_PASS);
	/* No client speaks from a VIP's address and port: such a packet is
	 * forged, or a backend's answer to another VIP (a request forged
	 * from VIP 2 to VIP 1), which balanced would bounce between two
	 * UDP services' backends through this edge without end. */
	struct vip_key sk = {.port = f->sport, .proto = k->proto, .flags = k->flags};

	__builtin_memcpy(sk.addr, f->src, sizeof(sk.addr));
	if (reason == LB_TX && bpf_map_lookup_elem(&vips, &sk))
		return count(LB_VIP_SOURCE, XDP_PASS);
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return count(LB_NOT_VIP, XDP_PASS);
	struct backend *b = 0;
	int id = choose(f, v, &b, reason == LB_TX);
	if (id < 0 || !b)
		return count(LB_NO_BACKEND, XDP_DROP);
	__u32 vid = v->id;
	int act = f->v6 ? encap6(ctx, cfg, b, inner_len, tos, flow_hash(f)) : encap4(ctx, cfg, b, inner_len, tos, df);
	if (act != XDP_TX)
		return act;
	add(&vip_stats, vid, inner_len);
	add(&backend_stats, id, inner_len);
	return count(reason, XDP_TX);
}

static __always_inline int lb4(struct xdp_md *ctx, void *data, void *data_end)
{
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct flow f = {};
	struct vip_key k = {};

	if ((void *)(ip + 1) > data_end)
		return count(LB_MALFORMED, XDP_PASS);
	if (ip->ihl != 5)
		return count(LB_FRAGMENT, XDP_PASS); /* options: as Katran, not balanced */
	if (ip->frag_off & bpf_htons(0x3fff))
		return count(LB_FRAGMENT, XDP_PASS);
	__u32 len = bpf_ntohs(ip->tot_len);
	void *l4 = ip + 1;

	/* 5.10's verifier keeps no bounds through a byte swap ("math between
	 * pkt pointer and register with unbounded min value"): the AND, which
	 * clang would drop as a no-op, gives it 0..65535. */
	asm volatile("%0 &= 0xffff" : "+r"(len));

	/* The header's length must fit the frame (Ethernet may pad it) and
	 * hold at least the ports: else the backend would get a packet whose
	 * outer length lies. */
	if (len < sizeof(*ip) + 4 || (void *)ip + len > data_end)
		return count(LB_MALFORMED, XDP_PASS);

	if (ip->protocol == IPPROTO_ICMP) {
		/* Fragmentation needed, about a packet a backend sent from the VIP
		 * to a client: the quoted header is VIP -> client. */
		struct icmp_head *ic = l4;
		struct iphdr *in = l4 + sizeof(*ic);

		if ((void *)(in + 1) > data_end)
			return count(LB_NOT_VIP, XDP_PASS);
		if (ic->type != ICMP_DEST_UNREACH || ic->code != ICMP_FRAG_NEEDED || in->ihl != 5)
			return count(LB_NOT_VIP, XDP_PASS);
		/* The error goes to the quoted packet's source, the VIP: one
		 * addressed elsewhere (the edge itself, a passer-by) is not the
		 * balancer's to steer. */
		if (ip->daddr != in->saddr)
			return count(LB_NOT_VIP, XDP_PASS);
		if (ports(in + 1, data_end, &f.dport, &f.sport))
			return count(LB_MALFORMED, XDP_PASS);
		f.src[0] = in->daddr;
		f.dst[0] = in->saddr;
		f.proto = in->protocol;
		k.addr[0] = in->saddr;
		k.port = f.dport;
		k.proto = in->protocol;
		return balance(ctx, &f, &k, len, ip->tos, ip->frag_off & bpf_htons(IP_DF), LB_ICMP_TX);
	}
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return count(LB_NOT_VIP, XDP_PASS);
	if (ports(l4, data_end, &f.sport, &f.dport))
		return count(LB_MALFORMED, XDP_PASS);
	f.src[0] = ip->saddr;
	f.dst[0] = ip->daddr;
	f.proto = ip->protocol;
	k.addr[0] = ip->daddr;
	k.port = f.dport;
	k.proto = ip->protocol;
	return balance(ctx, &f, &k, len, ip->tos, ip->frag_off & bpf_htons(IP_DF), LB_TX);
}

static __always_inline int lb6(struct xdp_md *ctx, void *data, void *data_end)
{
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct flow f = {.v6 = 1};
	struct vip_key k = {.flags = LB_V6};

	if ((void *)(ip6 + 1) > data_end)
		return count(LB_MALFORMED, XDP_PASS);
	__u32 len = bpf_ntohs(ip6->payload_len);

	asm volatile("%0 &= 0xffff" : "+r"(len)); /* bounds for 5.10 (above) */
	len += sizeof(*ip6);

	/* payload_len 0 (a jumbogram's) or past the frame: not balanced. */
	if (len < sizeof(*ip6) + 4 || (void *)ip6 + len > data_end)
		return count(LB_MALFORMED, XDP_PASS);
	__u8 tc = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	void *l4 = ip6 + 1;

	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		struct icmp_head *ic = l4;
		struct ipv6hdr *in = l4 + sizeof(*ic);

		if ((void *)(in + 1) > data_end)
			return count(LB_NOT_VIP, XDP_PASS);
		if (ic->type != ICMPV6_PKT_TOOBIG)
			return count(LB_NOT_VIP, XDP_PASS);
		if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
			return count(LB_NOT_VIP, XDP_PASS);
		if (ip6->daddr.in6_u.u6_addr32[0] != in->saddr.in6_u.u6_addr32[0] ||
		    ip6->daddr.in6_u.u6_addr32[1] != in->saddr.in6_u.u6_addr32[1] ||
		    ip6->daddr.in6_u.u6_addr32[2] != in->saddr.in6_u.u6_addr32[2] ||
		    ip6->daddr.in6_u.u6_addr32[3] != in->saddr.in6_u.u6_addr32[3])
			return count(LB_NOT_VIP, XDP_PASS);
		if (ports(in + 1, data_end, &f.dport, &f.sport))
			return count(LB_MALFORMED, XDP_PASS);
		__builtin_memcpy(f.src, &in->daddr, 16);
		__builtin_memcpy(f.dst, &in->saddr, 16);
		__builtin_memcpy(k.addr, &in->saddr, 16);
		f.proto = in->nexthdr;
		k.port = f.dport;
		k.proto = in->nexthdr;
		return balance(ctx, &f, &k, len, tc, 0, LB_ICMP_TX);
	}
	/* Hop-by-hop, destination options and a routing header with no
	 * segment left (the destination is final) are stepped over, at most
	 * MAX_EXT6 of them (RFC 8200 4.1); a fragment header, AH or a routing
	 * header still on its way is not balanced. */
	__u8 nh = ip6->nexthdr;

#pragma unroll
	for (int i = 0; i < MAX_EXT6; i++) {
		if (nh != NEXTHDR_HOP && nh != NEXTHDR_DEST && nh != NEXTHDR_ROUTING)
			break;
		__u8 *h = l4;

		if ((void *)(h + 4) > data_end)
			return count(LB_MALFORMED, XDP_PASS);
		if (nh == NEXTHDR_ROUTING && h[3] != 0)
			return count(LB_FRAGMENT, XDP_PASS);
		nh = h[0];
		l4 += ((__u32)h[1] + 1) * 8;
	}
	if (nh != IPPROTO_TCP && nh != IPPROTO_UDP)
		return count(LB_FRAGMENT, XDP_PASS);
	if (ports(l4, data_end, &f.sport, &f.dport))
		return count(LB_MALFORMED, XDP_PASS);
	__builtin_memcpy(f.src, &ip6->saddr, 16);
	__builtin_memcpy(f.dst, &ip6->daddr, 16);
	__builtin_memcpy(k.addr, &ip6->daddr, 16);
	f.proto = nh;
	k.port = f.dport;
	k.proto = nh;
	return balance(ctx, &f, &k, len, tc, 0, LB_TX);
}

SEC("xdp")
int xdplb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return count(LB_MALFORMED, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return lb4(ctx, data, data_end);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return lb6(ctx, data, data_end);
	return count(LB_NOT_IP, XDP_PASS);
}

/* xdplb_decap strips the outer IPIP / IP6IP6 header on a backend whose
 * kernel has no ipip / ip6_tunnel module (Katran's decap_kern.c does the
 * same): the inner packet, to the VIP held on lo, goes up the stack as if
 * it had arrived bare. Everything else passes untouched. */
SEC("xdp")
int xdplb_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ethhdr copy;
	int outer;
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->protocol != IPPROTO_IPIP || ip->ihl != 5)
			return XDP_PASS;
		outer = sizeof(struct iphdr);
		proto = bpf_htons(ETH_P_IP);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_IPV6)
			return XDP_PASS;
		outer = sizeof(struct ipv6hdr);
		proto = bpf_htons(ETH_P_IPV6);
	} else {
		return XDP_PASS;
	}
	__builtin_memcpy(&copy, eth, sizeof(copy));
	copy.h_proto = proto;
	if (bpf_xdp_adjust_head(ctx, outer))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth, &copy, sizeof(copy));
	return XDP_PASS;
}
