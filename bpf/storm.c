//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * storm: the fast packet generator of the e2e storms.
 *
 * Not attached anywhere: e2e/ runs it with BPF_PROG_TEST_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES (kernel 5.18+) from the storm namespace, with
 * xdp_md.ingress_ifindex set to the storm-side veth. In live-frames mode the
 * kernel turns XDP_TX into a redirect out of that ingress device, so every
 * run of this program puts one frame on the wire towards the edge.
 *
 * User space hands over one template frame per run (IPv4 or IPv6; UDP, TCP
 * SYN or ICMP echo) and this program rewrites the low 32 bits of its source
 * address per frame, cycling through `nsources` addresses, and rewrites the
 * checksums the source takes part in. Pages are recycled between runs with
 * whatever the previous run wrote, so every field written here is written
 * absolutely, never patched relative to what the frame holds.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* Frames are built by e2e/ with no VLAN tags and no IP options: every
 * offset below stays under this bound (IPv6 + TCP checksum: 14+40+16). */
#define MAX_OFFSET 128

/* What the next run sends; written by user space before each run. */
struct storm_config {
	__u32 nsources;    /* sources cycled through; 0 counts as 1 */
	__u32 base;        /* low 32 bits of the first source, host order */
	__u16 addr_off;    /* offset of those 32 bits in the frame */
	__u16 ip_csum_off; /* offset of the IPv4 header checksum; 0: none (IPv6) */
	__u16 l4_csum_off; /* offset of the L4 checksum if it covers the source; 0: none (ICMPv4) */
	__u16 _pad;
	__u32 ip_csum_base; /* ones' complement sum of the IPv4 header, source and checksum left out */
	__u32 l4_csum_base; /* same for the L4 checksum, pseudo-header included */
};

volatile struct storm_config cfg;

/* The template's frame sequence, set by user space before each run; the
 * source index is seq % nsources. One run at a time: plain increments. */
volatile __u64 seq;

static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

SEC("xdp")
int storm(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 n = cfg.nsources ? cfg.nsources : 1;
	__u64 s = seq;
	__u32 off;

	seq = s + 1;
	/* Native-order 16-bit words: a ones' complement sum is byte-order
	 * neutral as long as it is stored back the way it was loaded. */
	__u32 addr = bpf_htonl(cfg.base + (__u32)(s % n));
	__u32 words = (addr & 0xffff) + (addr >> 16);

	off = cfg.addr_off;
	if (off > MAX_OFFSET)
		return XDP_ABORTED;
	if (data + off + 4 > data_end)
		return XDP_ABORTED;
	*(__u32 *)(data + off) = addr;

	off = cfg.ip_csum_off;
	if (off) {
		if (off > MAX_OFFSET)
			return XDP_ABORTED;
		if (data + off + 2 > data_end)
			return XDP_ABORTED;
		*(__u16 *)(data + off) = fold(cfg.ip_csum_base + words);
	}
	off = cfg.l4_csum_off;
	if (off) {
		if (off > MAX_OFFSET)
			return XDP_ABORTED;
		if (data + off + 2 > data_end)
			return XDP_ABORTED;
		__u16 c = fold(cfg.l4_csum_base + words);
		/* UDP: 0 means "no checksum"; ones' complement -0 is the same sum. */
		*(__u16 *)(data + off) = c ? c : 0xffff;
	}
	return XDP_TX;
}
