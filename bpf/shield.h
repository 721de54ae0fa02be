/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared definitions and parsing helpers of the xdpshield programs. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

/* 802.1Q / 802.1ad tag: written here (a handful of fields) rather than taken
 * from linux/if_vlan.h, which is kernel-internal. */
struct vlan_tag {
	__be16 tci;
	__be16 proto; /* EtherType of what follows the tag */
};

/* Why a verdict was given. With proto and verdict it indexes the counters
 * (bpf/shield.c, account()). These enums are the contract with user space:
 * bpf2go emits them (-type, bpf/gen.go) and shield/counters.go derives its
 * constants from what it emits; TestContract checks the Go names against the
 * object's BTF. */
enum reason {
	REASON_OK = 0,        /* source within its bucket */
	REASON_ALLOW = 1,     /* allow-listed, never limited */
	REASON_DENY = 2,      /* deny-listed, always dropped */
	REASON_LIMIT = 3,     /* known source over its rate */
	REASON_ADMISSION = 4, /* unknown source, admission bucket empty */
	REASON_NOT_IP = 5,    /* EtherType neither IPv4 nor IPv6: passed */
	REASON_MALFORMED = 6, /* truncated or invalid headers: passed */
	REASON_SPOOFED = 7,   /* a source no frame from the wire can carry: an own
			       * address, or IPv4-mapped IPv6: always dropped */
	REASON_UNPROTECTED = 8, /* return traffic to the edge's own connections
				 * (shield.c, class_of): judged by the
				 * unprotected class's bucket (passed or dropped) */
	REASON_MAX,
};

enum proto {
	PROTO_TCP = 0,
	PROTO_UDP = 1,
	PROTO_ICMP = 2, /* ICMP and ICMPv6 */
	PROTO_OTHER = 3,
	PROTO_MAX,
};

enum verdict {
	VERDICT_PASS = 0,
	VERDICT_DROP = 1,
	VERDICT_MAX,
};

/* Result of parsing: the source and destination as IPv6 addresses (IPv4
 * mapped as ::ffff:a.b.c.d), the class of the upper-layer protocol (after
 * IPv6 extension headers) and, for TCP and UDP, the destination port.
 * Aligned so the source can be read as two __u64. */
struct packet {
	__u8 src[16];
	__u8 dst[16];
	__be16 dport;  /* TCP or UDP destination port, when has_port; for a
			* return candidate that is an ICMP error, the source
			* port of the flow it quotes */
	__u8 has_port; /* 0: not TCP/UDP, a non-first fragment, or truncated */
	__u8 is_v6;
	__u8 proto;
	__u8 ret;      /* a return candidate (see parse_l4): judged as return
			* traffic when dport is an ephemeral port */
} __attribute__((aligned(8)));

/* IPv6 next-header values the walk steps over (RFC 8200 4.1, RFC 4302);
 * any other ends the walk as the upper layer. */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60

/* The most IPv6 extension headers the walk steps over. RFC 8200 4.1's
 * full recommended order holds six (hop-by-hop, destination options,
 * routing, fragment, authentication, destination options; ESP ends the
 * walk: what follows it is encrypted). Cilium's ipv6_hdrlen stops at 4.
 * A chain longer than this is not walked: its packet counts as "other",
 * which is protected (class_of). */
#define IPV6_MAX_EXT 6

/* TCP flags (byte 13 of the header). */
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

static __always_inline __u8 proto_class(__u8 ipproto)
{
	switch (ipproto) {
	case IPPROTO_TCP:
		return PROTO_TCP;
	case IPPROTO_UDP:
		return PROTO_UDP;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return PROTO_ICMP;
	default:
		return PROTO_OTHER;
	}
}

/* icmp_error says whether an ICMP (v6: ICMPv6) type is an error message,
 * one that quotes the packet that caused it: for ICMP destination
 * unreachable (3), time exceeded (11), parameter problem (12) (RFC 792);
 * for ICMPv6 destination unreachable (1), packet too big (2), time
 * exceeded (3), parameter problem (4) (RFC 4443). */
static __always_inline int icmp_error(__u8 type, int v6)
{
	if (v6)
		return type >= 1 && type <= 4;
	return type == 3 || type == 11 || type == 12;
}

/*
 * parse_l4 fills pkt's protocol class and port from the upper-layer header
 * at l4 (protocol ipproto); first is 0 for a non-first fragment, which
 * carries no upper-layer header. It marks return candidates (pkt->ret),
 * what the edge's own connections bring back:
 *  - UDP;
 *  - TCP without SYN, or with SYN and ACK (a segment that opens no
 *    connection: the edge's stack answers it with a RST at most);
 *  - an ICMP error of the packet's own family quoting TCP or UDP: its
 *    port (pkt->dport) is the quoted source port, the edge's side of the
 *    flow. The quoted IPv6 header is taken as is: a quoted extension
 *    header makes no candidate.
 * class_of makes a candidate return traffic when its port is ephemeral.
 */
static __always_inline void parse_l4(void *l4, void *data_end, __u8 ipproto, int first, int v6, struct packet *pkt)
{
	__u8 *b = l4;

	pkt->proto = proto_class(ipproto);
	pkt->has_port = 0;
	pkt->ret = 0;
	if (!first)
		return;
	if (pkt->proto == PROTO_TCP || pkt->proto == PROTO_UDP) {
		if ((void *)(b + 4) > data_end)
			return;
		pkt->dport = ((__be16 *)b)[1];
		pkt->has_port = 1;
		if (pkt->proto == PROTO_UDP) {
			pkt->ret = 1;
			return;
		}
		if ((void *)(b + 14) > data_end)
			return;
		if (!(b[13] & TCP_FLAG_SYN) || (b[13] & TCP_FLAG_ACK))
			pkt->ret = 1;
		return;
	}
	if (pkt->proto != PROTO_ICMP || (ipproto == IPPROTO_ICMPV6) != v6)
		return;
	/* The ICMP header (8 bytes), then the quoted IP header. */
	if ((void *)(b + 8) > data_end || !icmp_error(b[0], v6))
		return;
	b += 8;
	__u8 inner;
	if (v6) {
		struct ipv6hdr *q = (void *)b;

		if ((void *)(q + 1) > data_end)
			return;
		inner = q->nexthdr;
		b = (void *)(q + 1);
	} else {
		struct iphdr *q = (void *)b;

		if ((void *)(q + 1) > data_end || q->ihl < 5)
			return;
		inner = q->protocol;
		b += (q->ihl & 0xf) * 4;
	}
	if (inner != IPPROTO_TCP && inner != IPPROTO_UDP)
		return;
	if ((void *)(b + 2) > data_end)
		return;
	pkt->dport = ((__be16 *)b)[0];
	pkt->ret = 1;
}

/* opaque hides v's value from the compiler, so it cannot turn the
 * arithmetic below back into comparisons (branches). */
#define opaque(v) asm volatile("" : "+r"(v))

/* EXT_MASK has bit n set for each next-header value n the walk steps over
 * (every one is below 64). */
#define EXT_MASK                                                                                                     \
	((1ULL << NEXTHDR_HOP) | (1ULL << NEXTHDR_ROUTING) | (1ULL << NEXTHDR_FRAGMENT) | (1ULL << NEXTHDR_AUTH) |    \
	 (1ULL << NEXTHDR_DEST))

/* is_ext is 1 when next header n (below 256) is one the walk steps over,
 * else 0, computed without a branch. */
static __always_inline __u64 is_ext(__u64 n)
{
	/* n >> 6 is 0 only below 64: (+ 3) >> 2 makes it 0 or 1. */
	__u64 high = (((n >> 6) + 3) >> 2) & 1;

	opaque(high);
	return (EXT_MASK >> (n & 63)) & 1 & (high ^ 1);
}

/*
 * parse_v6_upper walks the extension headers after an IPv6 fixed header
 * whose next header is nh and which ends at cur (RFC 8200 4: hop-by-hop,
 * routing, fragment, destination options; RFC 4302: authentication), at
 * most IPV6_MAX_EXT of them, and parses the upper-layer header it reaches.
 * A chain it cannot walk (longer than that, or cut short by the frame's
 * end) leaves the packet as "other" with no port: protected, never
 * return traffic. A fragment header with a non-zero offset makes the
 * packet a non-first fragment: its upper-layer protocol has no header
 * here. An atomic fragment (offset 0, no more fragments) or a first one
 * is walked through like any other header.
 *
 * For the verifier, a step is one path whatever the header: every step
 * runs, a step at the upper layer moving nothing, and a header's length,
 * (hdrlen + 1) * 8 for options and routing, (hdrlen + 2) * 4 for
 * authentication, 8 for a fragment, is computed without a branch, as
 * 8 + 4h + 4h (8 + 4h for authentication) with h = hdrlen (0 for a
 * fragment). With a branch per kind the verifier would follow a
 * path per combination of kinds, 3^IPV6_MAX_EXT of them, and the upper
 * layer's parse once per chain length.
 */
static __always_inline void parse_v6_upper(void *cur, void *data_end, __u8 nh, struct packet *pkt)
{
	__u64 n = nh;

#pragma unroll
	for (int i = 0; i < IPV6_MAX_EXT; i++) {
		__u8 *h = cur;

		opaque(n);
		__u64 ext = is_ext(n);

		opaque(ext);
		/* Every header stepped over is at least 8 bytes long. */
		if ((void *)(h + 8) > data_end) {
			/* Cut short: the header here, or the one before. */
			if (ext || (void *)h > data_end)
				goto unwalkable;
			goto upper; /* an upper-layer header shorter than 8 */
		}
		/* n ^ X is 0 for n == X and, for a header stepped over
		 * (below 64), below 64: + 63 >> 6 is 0 for X, else 1. The
		 * & 1 bounds it for verifiers that track no XOR (5.10). */
		__u64 not_auth = (((n ^ NEXTHDR_AUTH) + 63) >> 6) & 1;
		__u64 not_frag = (((n ^ NEXTHDR_FRAGMENT) + 63) >> 6) & 1;
		__u64 hl = h[1];
		/* Fragment offset (bytes 2-3, top 13 bits), of a fragment. */
		__u64 off = ((__u64)h[2] << 8 | h[3]) & 0xfff8;
		__u64 all = 0 - ext; /* all ones when a header is stepped over */

		opaque(not_auth);
		opaque(not_frag);
		hl &= 0 - not_frag;
		off &= (not_frag - 1) & all;
		if (off) {
			/* A non-first fragment: nothing of the upper layer. */
			parse_l4(0, data_end, h[0], 0, 1, pkt);
			return;
		}
		n = (h[0] & all) | (n & ~all);
		/* 8 + 4h, + 4h again unless AH. */
		hl <<= 2;
		cur = h + ((8 + hl + (hl & (0 - not_auth))) & all);
	}
	opaque(n);
	if (is_ext(n) || cur > data_end)
		goto unwalkable;
upper:
	parse_l4(cur, data_end, n, 1, 1, pkt);
	return;
unwalkable:
	pkt->proto = PROTO_OTHER;
	pkt->has_port = 0;
	pkt->ret = 0;
}

/* parse fills pkt and returns REASON_OK, REASON_NOT_IP or REASON_MALFORMED.
 * Every header read is preceded by an explicit data_end check. */
static __always_inline int parse(void *data, void *data_end, struct packet *pkt)
{
	struct ethhdr *eth = data;
	void *cursor = eth + 1;
	__be16 type;

	if (cursor > data_end)
		return REASON_MALFORMED;
	type = eth->h_proto;

	/* Up to two tags: an outer 802.1ad (or 802.1Q) and an inner 802.1Q. */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		struct vlan_tag *tag = cursor;

		if (type != bpf_htons(ETH_P_8021Q) && type != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(tag + 1) > data_end)
			return REASON_MALFORMED;
		type = tag->proto;
		cursor = tag + 1;
	}

	if (type == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cursor;

		if ((void *)(ip + 1) > data_end)
			return REASON_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return REASON_MALFORMED;
		if ((void *)ip + ip->ihl * 4 > data_end)
			return REASON_MALFORMED;
		__builtin_memset(pkt->src, 0, 10);
		pkt->src[10] = 0xff;
		pkt->src[11] = 0xff;
		__builtin_memcpy(&pkt->src[12], &ip->saddr, 4);
		__builtin_memset(pkt->dst, 0, 10);
		pkt->dst[10] = 0xff;
		pkt->dst[11] = 0xff;
		__builtin_memcpy(&pkt->dst[12], &ip->daddr, 4);
		pkt->is_v6 = 0;
		/* A non-first fragment carries no L4 header. */
		parse_l4((void *)ip + ip->ihl * 4, data_end, ip->protocol, !(ip->frag_off & bpf_htons(0x1fff)), 0, pkt);
		return REASON_OK;
	}
	if (type == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cursor;

		if ((void *)(ip6 + 1) > data_end)
			return REASON_MALFORMED;
		if (ip6->version != 6)
			return REASON_MALFORMED;
		__builtin_memcpy(pkt->src, &ip6->saddr, 16);
		__builtin_memcpy(pkt->dst, &ip6->daddr, 16);
		pkt->is_v6 = 1;
		parse_v6_upper(ip6 + 1, data_end, ip6->nexthdr, pkt);
		return REASON_OK;
	}
	return REASON_NOT_IP;
}
