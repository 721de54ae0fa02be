//go:build ignore
// SPDX-License-Identifier: GPL-2.0
/*
 * dispatcher: a multi-program XDP dispatcher in the format of libxdp's,
 * version 2 (xdp-project/xdp-tools, lib/libxdp/protocol.org, "Dispatcher
 * format"), so that the shield can run as one component beside programs
 * that xdp-loader, xdp-filter or any libxdp user attach, and they beside it.
 *
 * The program is named xdp_dispatcher and has one map, its configuration in
 * .rodata (frozen, BPF_F_RDONLY_PROG): magic 236, version 2, the number of
 * slots in use, is_xdp_frags, then per slot the XDP actions that go on to
 * the next slot (a bit per action, bit 31 for the stub's own return), the
 * run priority and the program's load flags. The ten stubs prog0..prog9 are
 * replaced at attach time by the components (BPF_PROG_TYPE_EXT, freplace);
 * a stub left in place returns 31, which always goes on. The verifier drops
 * the calls past num_progs_enabled, the configuration being read-only.
 *
 * The stubs call bpf_xdp_adjust_tail(ctx, 0), a no-op, so that a component
 * that changes packet data may replace them on kernels that check it.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define DISPATCHER_MAGIC 236
#define DISPATCHER_VERSION 2
#define DISPATCHER_RETVAL 31
#define DISPATCHER_SLOTS 10

struct dispatcher_config {
	__u8 magic;
	__u8 dispatcher_version;
	__u8 num_progs_enabled;
	__u8 is_xdp_frags;
	__u32 chain_call_actions[DISPATCHER_SLOTS];
	__u32 run_prios[DISPATCHER_SLOTS];
	__u32 program_flags[DISPATCHER_SLOTS];
};

static volatile const struct dispatcher_config conf = {};

#define STUB(n)                                                  \
	__attribute__((noinline)) int prog##n(struct xdp_md *ctx) \
	{                                                        \
		volatile int ret = DISPATCHER_RETVAL;            \
		if (!ctx)                                        \
			return XDP_ABORTED;                      \
		bpf_xdp_adjust_tail(ctx, 0);                     \
		return ret;                                      \
	}

STUB(0)
STUB(1)
STUB(2)
STUB(3)
STUB(4)
STUB(5)
STUB(6)
STUB(7)
STUB(8)
STUB(9)

#define SLOT(n)                                                  \
	if (enabled < n + 1)                                     \
		goto out;                                        \
	ret = prog##n(ctx);                                      \
	if (!((1U << ret) & conf.chain_call_actions[n]))         \
		return ret;

SEC("xdp")
int xdp_dispatcher(struct xdp_md *ctx)
{
	__u8 enabled = conf.num_progs_enabled;
	int ret;

	SLOT(0)
	SLOT(1)
	SLOT(2)
	SLOT(3)
	SLOT(4)
	SLOT(5)
	SLOT(6)
	SLOT(7)
	SLOT(8)
	SLOT(9)
out:
	return XDP_PASS;
}

/* A component that passes every frame: the probe's extension (shield/pin,
 * ProbeDispatcher), as libxdp's object carries one too. */
SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";

/* libxdp reads the version from BTF when it loads a dispatcher object. */
int (*dispatcher_version)[DISPATCHER_VERSION] SEC("xdp_metadata");
