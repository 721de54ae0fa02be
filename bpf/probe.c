//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * probe: the second probe of xdpshield, a traffic-control program pair that
 * times requests per flow on the edge's interface.
 *
 * probe_ingress sees a request come in (client -> edge) and notes the time
 * under the flow's 5-tuple, written from the client's side; probe_egress
 * sees the edge's answer go out on the same 5-tuple reversed, and records
 * the time since into a histogram of every flow and one of that flow. For
 * UDP every datagram is a request or an answer; for TCP only segments that
 * carry data (and SYN, SYN-ACK) count, so pure ACKs neither start nor stop
 * the clock. A request that spans several segments is timed from the first.
 *
 * Attached with TCX (kernel 6.6+) or a clsact qdisc before; the loader
 * probes and chooses. Both return TC_ACT_UNSPEC: the packet goes on to the
 * next program or filter, untouched. Loads on 5.10 and later (LRU hash 4.10,
 * global data 5.2, direct packet access in tc since 4.7).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* Only flows to this edge port are timed (host order); 0: every port.
 * Set at load time. */
const volatile __u16 server_port = 0;

/* One flow, written from the client's side whichever way the packet goes.
 * IPv4 addresses are mapped (::ffff:a.b.c.d). */
struct flow_key {
	__u8 client[16];     /* the requester's address */
	__u8 server[16];     /* the edge's address */
	__u16 client_port;   /* host order */
	__u16 server_port;   /* host order */
	__u8 proto;          /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 _pad[3];
};

/* The histogram: slot v for v < 4 ns, then four slots per power of two
 * (2^l .. 2^(l+1)), split linearly: slot 4*l + the two bits below the top
 * one. A slot is at most a quarter of its lower bound wide. */
#define HIST_SLOTS 168 /* up to 2^42 ns (73 min); longer lands in the last slot */

/* Requests in flight: the time the request's first packet came in. An LRU,
 * so flows whose answer never comes do not stay. */
#define MAX_INFLIGHT 65536
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, struct flow_key);
	__type(value, __u64); /* bpf_ktime_get_ns of the request */
} inflight SEC(".maps");

/* Per-flow figures. */
struct flow_stats {
	__u64 count;            /* requests answered */
	__u64 sum_ns;           /* their times, summed */
	__u32 hist[HIST_SLOTS]; /* their times, by slot */
};

#define MAX_FLOWS 16384
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct flow_stats);
} flows SEC(".maps");

/* Every flow's times together, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64); /* requests whose time fell in the slot */
} hist SEC(".maps");

/* Event counters, per CPU: index STAT_*. */
#define STAT_REQUESTS 0  /* requests seen coming in (timer started) */
#define STAT_ANSWERED 1  /* answers matched to a request */
#define STAT_MAX 2
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* clang emits BTF only for types a global reaches. */
const struct flow_stats *unused_flow_stats __attribute__((unused));

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 slot(__u64 ns)
{
	if (ns < 4)
		return (__u32)ns;
	__u32 l = log2_u64(ns);
	__u32 s = 4 * l + (__u32)((ns >> (l - 2)) & 3);
	return s < HIST_SLOTS ? s : HIST_SLOTS - 1;
}

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &i);

	if (c)
		*c += 1;
}

/* parse fills k (from the packet's own point of view: src into client,
 * dst into server) and returns 1 when the packet is a request or answer
 * candidate: UDP, or TCP with data or SYN. */
static __always_inline int parse(struct __sk_buff *skb, struct flow_key *k)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	void *l4;
	__u32 l4len;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return 0;
		if (ip->frag_off & bpf_htons(0x1fff)) /* a later fragment: no ports */
			return 0;
		k->client[10] = 0xff;
		k->client[11] = 0xff;
		__builtin_memcpy(&k->client[12], &ip->saddr, 4);
		k->server[10] = 0xff;
		k->server[11] = 0xff;
		__builtin_memcpy(&k->server[12], &ip->daddr, 4);
		proto = ip->protocol;
		l4 = (void *)ip + ip->ihl * 4;
		l4len = bpf_ntohs(ip->tot_len);
		if (l4len < ip->ihl * 4)
			return 0;
		l4len -= ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		__builtin_memcpy(k->client, &ip6->saddr, 16);
		__builtin_memcpy(k->server, &ip6->daddr, 16);
		proto = ip6->nexthdr; /* extension headers: not timed */
		l4 = ip6 + 1;
		l4len = bpf_ntohs(ip6->payload_len);
	} else {
		return 0;
	}
	k->proto = proto;
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end)
			return 0;
		k->client_port = bpf_ntohs(udp->source);
		k->server_port = bpf_ntohs(udp->dest);
		return 1;
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end)
			return 0;
		k->client_port = bpf_ntohs(tcp->source);
		k->server_port = bpf_ntohs(tcp->dest);
		/* GSO: tot_len may be 0 on a super-packet; take it as data. */
		if (tcp->syn || l4len == 0 || l4len > (__u32)tcp->doff * 4)
			return 1;
	}
	return 0;
}

SEC("tc")
int probe_ingress(struct __sk_buff *skb)
{
	struct flow_key k = {};
	__u64 now;

	if (!parse(skb, &k))
		return TC_ACT_UNSPEC;
	if (server_port && k.server_port != server_port)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	/* BPF_NOEXIST: the first packet of a request starts the clock. */
	if (bpf_map_update_elem(&inflight, &k, &now, BPF_NOEXIST) == 0)
		count(STAT_REQUESTS);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int probe_egress(struct __sk_buff *skb)
{
	struct flow_key p = {}, k = {};
	struct flow_stats *fs;
	__u64 *start, now, d;
	__u32 s;

	if (!parse(skb, &p))
		return TC_ACT_UNSPEC;
	/* An answer goes from the server's side: turn the key around. */
	__builtin_memcpy(k.client, p.server, 16);
	__builtin_memcpy(k.server, p.client, 16);
	k.client_port = p.server_port;
	k.server_port = p.client_port;
	k.proto = p.proto;
	if (server_port && k.server_port != server_port)
		return TC_ACT_UNSPEC;
	start = bpf_map_lookup_elem(&inflight, &k);
	if (!start)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	d = now > *start ? now - *start : 0;
	bpf_map_delete_elem(&inflight, &k);
	count(STAT_ANSWERED);

	s = slot(d);
	__u64 *h = bpf_map_lookup_elem(&hist, &s);
	if (h)
		*h += 1;

	fs = bpf_map_lookup_elem(&flows, &k);
	if (!fs) {
		static const struct flow_stats zero;

		bpf_map_update_elem(&flows, &k, &zero, BPF_NOEXIST);
		fs = bpf_map_lookup_elem(&flows, &k);
		if (!fs)
			return TC_ACT_UNSPEC;
	}
	__sync_fetch_and_add(&fs->count, 1);
	__sync_fetch_and_add(&fs->sum_ns, d);
	if (s < HIST_SLOTS)
		__sync_fetch_and_add(&fs->hist[s], 1);
	return TC_ACT_UNSPEC;
}
