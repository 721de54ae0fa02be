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
	REASON_UNPROTECTED = 8, /* to a destination not protected: judged by the
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
 * mapped as ::ffff:a.b.c.d), the L4 protocol class and, for TCP and UDP, the
 * destination port. Aligned so the source can be read as two __u64. */
struct packet {
	__u8 src[16];
	__u8 dst[16];
	__be16 dport;  /* TCP or UDP destination port, when has_port */
	__u8 has_port; /* 0: not TCP/UDP, a non-first fragment, or truncated */
	__u8 is_v6;
	__u8 proto;
} __attribute__((aligned(8)));

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
		pkt->proto = proto_class(ip->protocol);
		pkt->has_port = 0;
		/* A non-first fragment carries no L4 header. */
		if ((pkt->proto == PROTO_TCP || pkt->proto == PROTO_UDP) && !(ip->frag_off & bpf_htons(0x1fff))) {
			__be16 *ports = (void *)ip + ip->ihl * 4;

			if ((void *)(ports + 2) <= data_end) {
				pkt->dport = ports[1];
				pkt->has_port = 1;
			}
		}
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
		/* Extension headers are not walked: they count as "other". */
		pkt->proto = proto_class(ip6->nexthdr);
		pkt->has_port = 0;
		if (pkt->proto == PROTO_TCP || pkt->proto == PROTO_UDP) {
			__be16 *ports = (void *)(ip6 + 1);

			if ((void *)(ports + 2) <= data_end) {
				pkt->dport = ports[1];
				pkt->has_port = 1;
			}
		}
		return REASON_OK;
	}
	return REASON_NOT_IP;
}
