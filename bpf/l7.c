//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * l7: the socket-layer data plane of the L7 fast path (issue 16).
 *
 * Requests arrive from the wire on the client sockets the proxy accepted
 * (clients sockhash): an SK_SKB stream parser delimits each HTTP/1.1 request
 * (request line, headers up to MAX_HDR bytes, a Content-Length body),
 * extracts method, path, Host and one named header, matches the policy held
 * in maps and decides; the SK_SKB verdict then redirects the request to the
 * client's pooled upstream socket for the chosen backend, or passes it to the
 * proxy reading the socket (the fallback, which answers exactly as it would
 * alone). Responses: user space relays them (see below); no program is
 * attached to the upstreams sockhash.
 *
 * What passes, and whether the connection stays on the proxy from then on
 * ("sticky": the stream can no longer be delimited here): a message the
 * parser cannot frame (chunked, headers beyond MAX_HDR, a body beyond
 * MAX_BODY, bare LF, control bytes, obs-fold, hop-by-hop headers, duplicate
 * Host or Content-Length, data after the request in the same segment, a
 * request line not taken here while the headers are still incomplete, a
 * head the proxy answers itself (denied, no route, unparsed) whose body
 * has not all come: the proxy answers it at once) is sticky; a framed request is passed alone
 * when its method, version, path, Host or named header is outside what is
 * parsed here (a path with '%', '\\', a tab, "//" or a dot-segment, which
 * the proxy normalises or refuses; a forwarding or proxy header, which it
 * strips; a Content-Length with a leading zero, which it rewrites), when the
 * policy denies it (the proxy answers 403) or routes it nowhere (404), when
 * the policy holds what the kernel does not implement (set_header), when no
 * pooled socket exists (a miss: the proxy forwards it and fills the pool),
 * while the proxy has not answered every request passed before, or while
 * a request this program redirected has not had its whole response
 * relayed (busy). Responses: user space reads each pooled socket, frames
 * each response (net/http), writes it to the client and counts it (ctl
 * done); the proxy writes nothing to a client before the responses it
 * owes to requests redirected before. So at most one request of a
 * connection is at a backend through the kernel, nothing the proxy
 * answers overtakes it, and a connection's responses leave in its
 * requests' order (issue 24, finding 2: before, the kernel redirected
 * responses itself and never waited for one).
 *
 * Loads and attaches on 5.10 and later: sockhash and SK_SKB parser/verdict
 * (4.18), bounded loops (5.3), sockhash lookup from programs (probed by the
 * loader: without it the verdict redirects blind). Serving is another
 * matter: l7.MinKernel says which kernels the loader accepts and why.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#define MAX_SOCKS 65536
#define MAX_CONNS 65536
#define MAX_POOL 65536
#define MAX_ROUTES 8
#define MAX_RULES 8
#define RING_SLOTS 256
#define MAX_HDR 512     /* bytes of request line + headers parsed (the verifier keeps at most 8192 branches pending along one path: ~12 per byte) */
#define MAX_LINES 32    /* lines within them */
#define MAX_PATH 128    /* bytes of the path */
#define MAX_PREFIX 64   /* bytes of a route's or rule's path prefix */
#define MAX_HOST 32     /* bytes of Host */
#define MAX_VAL 32      /* bytes of the named header's value */
#define MAX_NAME 32     /* bytes of a header name */
#define MAX_BODY 65536  /* bytes of a Content-Length body */

/* Reasons: what happened to each message, counted per CPU. */
enum reason {
	R_FAST = 0,      /* request redirected to a pooled upstream socket */
	R_MISS,          /* passed: no pooled socket for the backend */
	R_DENY,          /* passed: RBAC denies (the proxy answers 403) */
	R_NOROUTE,       /* passed: no route (404) */
	R_BUSY,          /* passed: the proxy still answers earlier requests */
	R_UNPARSED,      /* passed: method, version, path, Host or header not handled here */
	R_POLICY,        /* passed: the policy holds what the kernel does not implement */
	R_STICKY,        /* passed, connection on the proxy for good (unframable) */
	R_STICKY_MORE,   /* passed: later data of a sticky connection */
	R_RESPONSE,      /* unused: responses are relayed by user space (l7/fast.go counts them) */
	R_REDIRECT_GONE, /* passed: the pooled socket had gone */
	R_UNKNOWN,       /* passed: socket without state */
	R_CRLF,          /* dropped: CR/LF after a POST the kernel took (as Go's server drops them) */
	R_MAX,
};
#define COUNTERS (R_MAX + MAX_ROUTES)

/* Policy compiled from the Go configuration (l7/fast.go writes it). */
struct route {
	__u8 host[MAX_HOST];     /* lowercase Host, or empty for any */
	__u8 prefix[MAX_PREFIX]; /* path prefix */
	__u32 host_len;
	__u32 prefix_len;
};

struct rule {
	__u8 prefix[MAX_PREFIX]; /* path prefix, prefix_len 0: any */
	__u8 value[MAX_VAL];     /* value of the named header, when has_value */
	__u32 prefix_len;
	__u32 value_len;
	__u32 methods;   /* method bits (l7/config.go methodBits), 0: any */
	__u32 src_bit;   /* bit of the client's source mask, 0xff: any source */
	__u32 has_value; /* the named header must equal value */
	__u32 deny;      /* 1: deny, 0: allow */
};

struct policy {
	__u32 enabled;   /* 0: pass everything (a policy the kernel cannot hold) */
	__u32 n_routes;
	__u32 n_rules;
	__u32 hash;      /* 1: the named header picks the backend */
	__u32 set_header; /* 1: requests need a header set: passed (not implemented here) */
	__u32 name_len;  /* 0: no named header; at most 32 */
	__u64 name_w[4]; /* the named header's name, lowercase, packed (W), each byte | 0x20 */
	__u64 name_m[4]; /* masks of its bytes in name_w (all ones, then its tail, then 0) */
	struct route routes[MAX_ROUTES];
	struct rule rules[MAX_RULES];
};

struct pool_key {
	__u64 client; /* client socket cookie */
	__u32 backend; /* backend id */
	__u32 pad;
};

/* Kernel-written state of a client connection. */
struct conn {
	__u64 passed; /* requests passed to the proxy */
	__u64 target; /* parser -> verdict: upstream cookie, 0: pass */
	__u32 reason; /* parser -> verdict: enum reason */
	__u32 sticky; /* 1: everything passes from now on */
	__u32 route;  /* parser -> verdict: route of a fast request */
	__u32 msg_len; /* parser -> verdict: length of the message the parser framed */
	__u64 passed_bytes; /* bytes passed to the proxy (what it must read) */
	__u64 fast;    /* requests redirected to a pooled socket */
	__u64 fast_up; /* the pooled socket the last of them went to */
	__u32 crlf;    /* CR/LF bytes still to drop after a POST redirected (at most 4) */
	__u32 pad;
};

/* User-written control of a client connection. */
struct ctl {
	__u64 expected; /* requests the proxy has answered; fast only when passed == expected */
	__u32 src_mask; /* bit i: the source matches rule i's source prefix */
	__u32 pad;
	__u64 done;     /* responses to redirected requests relayed; fast only when fast == done */
};

struct scratch {
	__u8 buf[MAX_HDR];
	__u8 path[MAX_PATH];
	__u8 host[MAX_HOST];
	__u8 val[MAX_VAL];
	__u16 ends[MAX_LINES];
	__u16 nlens[MAX_LINES]; /* name length of each header line */
	__u32 n;
	__u32 nl;
	__u32 hdr_end;
	__u32 bad;
	__u32 unparsed;
	__u32 path_len;
	__u32 host_len;
	__u32 val_len;
	__u32 have_host;
	__u32 have_val;
	__u32 have_cl;
	__u32 cl;
	__u32 method;
	/* frame()'s per-line state, kept in memory so the verifier's states
	 * at the loop head differ only in the loop counter */
	__u32 line_start;
	__u32 in_name;
	__u32 nlen;
	__u32 kind;     /* K_* of the current header line */
	__u32 vlen;     /* value bytes seen (leading OWS skipped) */
	__u32 vstarted;
	__u32 trail;    /* trailing spaces and tabs of the value so far */
	__u32 ndig;
	/* decide()'s loop-carried state, in memory for the same reason */
	__u32 d_best;
	__u32 d_score;
	__u32 d_match;
	__u32 d_hash;
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);   /* socket cookie */
	__type(value, __u32); /* socket fd (user space) */
} clients SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);   /* socket cookie */
	__type(value, __u32); /* socket fd (user space) */
} upstreams SEC(".maps");

/* Relay sockets (load-time switch relay): one end of a socket pair per
 * client connection, which the proxy reads instead of the client socket.
 * Messages for the proxy are redirected to its ingress; no program is
 * attached to this map. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);   /* client socket cookie */
	__type(value, __u32); /* relay socket fd (user space) */
} relays SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64); /* client socket cookie */
	__type(value, struct conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64); /* client socket cookie */
	__type(value, struct ctl);
} ctls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_POOL);
	__type(key, struct pool_key);
	__type(value, __u64); /* upstream socket cookie */
} pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_POOL);
	__type(key, __u64);   /* upstream socket cookie */
	__type(value, __u64); /* its client socket cookie */
} peer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct policy);
} policies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ROUTES * RING_SLOTS);
	__type(key, __u32);   /* route * RING_SLOTS + slot */
	__type(value, __u32); /* backend id */
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);   /* enum reason, then R_MAX + route (fast requests per route) */
	__type(value, __u64);
} counters SEC(".maps");

/* The parser's working copy of a message, one per client connection (its
 * cookie; user space makes it at accept, beside conns, and deletes it at
 * close; allocated then, not up front: about 1 KiB a connection). Not one
 * per CPU: the parser runs in process context too (the strparser's work,
 * with migration off but preemption and softirqs on), and a softirq's
 * parse of another connection on the same CPU overwrote the copy mid-parse
 * (7.2 under TCG: a well-formed GET judged unframable, 2 in 60 runs of
 * TestFastPathManyConns; what a clobbered copy decides could as well be
 * another request's route or rule). One connection's parses never overlap:
 * the strparser runs them under the socket's lock. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* client socket cookie */
	__type(value, struct scratch);
} scratch SEC(".maps");

/* Load-time switch: the kernel lets programs look sockhash entries up. */
const volatile __u32 have_lookup = 0;

/* Load-time switch: hand a message to the proxy by redirecting it to the
 * ingress of its own client socket instead of SK_PASS (l7.PassRedirect,
 * on). With SK_PASS a passed message could wait unread for good: on 6.1
 * the stream parser's read accounts passed bytes still unread as consumed
 * (tcp_bpf_strp_read_sock sets copied_seq to what it consumed less what
 * this read passed), the proxy's read counts them again, copied_seq runs
 * past the data received, and a later small segment no longer runs the
 * parser; on 6.18 about one sticky connection in 2,000 stalled with its
 * message queued and the proxy never woken. A redirected message is queued
 * by the socket's backlog worker instead; neither was seen then. */
const volatile __u32 pass_redirect = 0;

/* Load-time switch: hand a message to the proxy by redirecting it to the
 * ingress of the client connection's relay socket (relays), which the
 * proxy reads (l7.Relay). Kernels with "bpf, sockmap: Fix self-redirect
 * copied_seq double-counting" (6.12.113+, 7.2) turn pass_redirect's
 * redirect into SK_PASS, and the stream parser's read then counts a passed
 * message still unread at its next read as consumed, which the reader
 * counts again: copied_seq overtakes rcv_nxt and a short last segment
 * wakes nobody. A message redirected to another socket is counted once,
 * by the parser's read. Wins over pass_redirect. */
const volatile __u32 relay = 0;

/* pass hands the message to the proxy reading the client socket cookie.
 * The helper records the redirect in the skb and SK_PASS carries it out;
 * should the socket have left the sockhash already (it is being closed),
 * the helper records nothing (it returns SK_DROP, ignored here) and the
 * message is passed rather than dropped. On kernels with "bpf, sockmap:
 * Fix self-redirect copied_seq double-counting" (Debian 6.12.113 and
 * later, 7.2) sk_psock_verdict_apply turns a redirect to the socket's own
 * ingress into SK_PASS itself: there both are the same (README "L7 fast
 * path", Kernels). */
static __always_inline int pass(struct __sk_buff *skb, __u64 cookie)
{
	if (relay)
		bpf_sk_redirect_hash(skb, &relays, &cookie, BPF_F_INGRESS);
	else if (pass_redirect)
		bpf_sk_redirect_hash(skb, &clients, &cookie, BPF_F_INGRESS);
	return SK_PASS;
}

/* One CPU's counters are shared by every connection: atomically, as a
 * softirq's verdict may run between the load and the store of one running
 * in the strparser's work on the same CPU (the parser's scratch was lost
 * that way, e426204). */
static __always_inline void count(__u32 r)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &r);
	if (c)
		__sync_fetch_and_add(c, 1);
}


#define B(s, i) ((s)->buf[(i) & (MAX_HDR - 1)])

/* Header names are recognised by their bytes (issue 24: before, by their
 * length and an FNV-1a hash, and a name of the same length and hash passed
 * for Content-Length). A name's bytes are read from the buffer eight at a
 * time (NW: word j of the name starting at st), lowercased by setting bit
 * 0x20 of every byte and masked to the name's length; the words compare
 * with names packed the same way (W, byte i at bits 8*(i%8)). Setting 0x20
 * maps two token characters to one only for '^' and '~' and letters to
 * their lowercase, so for names of letters, digits and '-' (every name
 * here; l7/fast.go refuses a named header with '^' or '~') equal words
 * are equal names, case aside, as HTTP compares them. The words are read,
 * not built byte by byte in frame()'s loop: each instruction there is
 * verified once per byte of MAX_HDR. */
#define W(a, b, c, d, e, f, g, h)                                                                           \
	((__u64)(a) | (__u64)(b) << 8 | (__u64)(c) << 16 | (__u64)(d) << 24 | (__u64)(e) << 32 |              \
	 (__u64)(f) << 40 | (__u64)(g) << 48 | (__u64)(h) << 56)
#define LOWER 0x2020202020202020ULL
/* word j of the name at st, lowercase, unmasked: the load may run past
 * buf into the rest of the scratch (read only, masked off by callers) */
#define NW(s, st, j) ((*(__u64 *)&(s)->buf[((st) + 8 * (j)) & (MAX_HDR - 1)]) | LOWER)
/* mask of the first n bytes of a word, 0 < n < 8 */
#define M(n) ((1ULL << (8 * (n))) - 1)

/* Sticky: the rest of this connection goes to the proxy. */
static __always_inline int go_sticky(struct conn *c, __u32 len)
{
	c->sticky = 1;
	c->target = 0;
	c->reason = R_STICKY;
	c->msg_len = len;
	return len;
}

/* Byte classes, one load instead of a chain of compares per byte (each
 * compare is a branch the verifier keeps pending along a 1024-byte path). */
#define C_TCHAR 1  /* token character (header names, methods) */
#define C_HOST 2   /* lowercase host character: a-z 0-9 . - : */
#define C_CTL 4    /* control or non-ASCII byte other than \t \r \n */
#define C_DIGIT 8
#define C_OWS 16   /* space or tab */
#define C_UPPER 32 /* A-Z */

static const __u8 cls[256] = {
	/* 0x00 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x08 */ C_CTL, C_OWS, 0, C_CTL, C_CTL, 0, C_CTL, C_CTL,
	/* 0x10 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x18 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x20 */ C_OWS, C_TCHAR, 0, C_TCHAR, C_TCHAR, C_TCHAR, C_TCHAR, C_TCHAR,
	/* 0x28 */ 0, 0, C_TCHAR, C_TCHAR, 0, C_TCHAR|C_HOST, C_TCHAR|C_HOST, 0,
	/* 0x30 */ C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT,
	/* 0x38 */ C_TCHAR|C_HOST|C_DIGIT, C_TCHAR|C_HOST|C_DIGIT, C_HOST, 0, 0, 0, 0, 0,
	/* 0x40 */ 0, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER,
	/* 0x48 */ C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER,
	/* 0x50 */ C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER,
	/* 0x58 */ C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, C_TCHAR|C_UPPER, 0, 0, 0, C_TCHAR, C_TCHAR,
	/* 0x60 */ C_TCHAR, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST,
	/* 0x68 */ C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST,
	/* 0x70 */ C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST,
	/* 0x78 */ C_TCHAR|C_HOST, C_TCHAR|C_HOST, C_TCHAR|C_HOST, 0, C_TCHAR, 0, C_TCHAR, C_CTL,
	/* 0x80 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x88 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x90 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0x98 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xa0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xa8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xb0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xb8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xc0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xc8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xd0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xd8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xe0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xe8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xf0 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
	/* 0xf8 */ C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL, C_CTL,
};
_Static_assert(sizeof(cls) == 256, "cls covers every byte");

enum { K_OTHER = 0, K_HOST, K_CL, K_VAL };

/* frame: one pass over the bytes: line ends, the end of the headers, and
 * each header line's name (by its bytes: NW) and value (Host, Content-
 * Length, the named header). Sets bad (unframable: sticky) or unparsed
 * (framed, but not for the fast path). */
static __always_inline void frame(struct scratch *s, struct policy *pol)
{
	volatile struct scratch *v = s;
	v->nl = 0;
	v->hdr_end = 0;
	v->bad = 0;
	v->unparsed = 0;
	v->have_host = 0;
	v->have_val = 0;
	v->have_cl = 0;
	v->cl = 0;
	v->ndig = 0; /* digits of the one Content-Length (a second is bad) */
	v->host_len = 0;
	v->val_len = 0;
	for (__u32 i = 0; i < MAX_HDR; i++) {
		if (i >= v->n)
			break;
		__u8 c = B(s, i);
		if (c == '\n') {
			__u32 nl = v->nl;
			if (i == 0 || B(s, i - 1) != '\r' || nl >= MAX_LINES) {
				v->bad = 1;
				break;
			}
			s->ends[nl & (MAX_LINES - 1)] = i;
			if (nl > 0) {
				if (v->line_start + 1 == i) { /* the empty line */
					v->hdr_end = i + 1;
					break;
				}
				if (v->in_name) {
					v->bad = 1; /* no colon */
					break;
				}
				__u32 n = v->vlen - v->trail;
				switch (v->kind) {
				case K_HOST:
					if (n == 0 || n > MAX_HOST)
						v->unparsed = 1;
					v->host_len = n;
					break;
				case K_VAL:
					if (n > MAX_VAL)
						v->unparsed = 1;
					v->val_len = n;
					break;
				case K_CL:
					if (v->ndig == 0) {
						v->bad = 1;
						goto out;
					}
					break;
				}
			} else if (i == 1) {
				v->bad = 1; /* an empty first line */
				break;
			}
			v->nl = nl + 1;
			v->line_start = i + 1;
			v->in_name = 1;
			v->nlen = 0;
			v->kind = K_OTHER;
			v->vlen = 0;
			v->vstarted = 0;
			v->trail = 0;
			continue;
		}
		if (c == '\r') {
			if (i + 1 < v->n && B(s, i + 1) != '\n') {
				v->bad = 1;
				break;
			}
			continue;
		}
		__u8 k = cls[c];
		if (k & C_CTL) {
			v->bad = 1;
			break;
		}
		if (v->nl == 0)
			continue; /* the request line: request_line() reads it */
		if (v->in_name) {
			if (c == ':') {
				v->in_name = 0;
				if (v->nlen == 0) {
					v->bad = 1;
					break;
				}
				__u32 st = v->line_start;
				__u32 nlen = v->nlen;
				s->nlens[v->nl & (MAX_LINES - 1)] = nlen;
				if (nlen == 4 && (NW(s, st, 0) & M(4)) == W('h', 'o', 's', 't', 0, 0, 0, 0)) {
					if (v->have_host) {
						v->bad = 1; /* duplicate Host: the proxy answers 400 */
						break;
					}
					v->have_host = 1;
					v->kind = K_HOST;
				} else if (nlen == 14 && NW(s, st, 0) == W('c', 'o', 'n', 't', 'e', 'n', 't', '-') &&
					   (NW(s, st, 1) & M(6)) == W('l', 'e', 'n', 'g', 't', 'h', 0, 0)) {
					if (v->have_cl) {
						v->bad = 1;
						break;
					}
					v->have_cl = 1;
					v->kind = K_CL;
				} else if (pol->name_len && nlen == pol->name_len &&
					   (NW(s, st, 0) & pol->name_m[0]) == pol->name_w[0] &&
					   (NW(s, st, 1) & pol->name_m[1]) == pol->name_w[1] &&
					   (NW(s, st, 2) & pol->name_m[2]) == pol->name_w[2] &&
					   (NW(s, st, 3) & pol->name_m[3]) == pol->name_w[3]) {
					if (v->have_val)
						v->unparsed = 1; /* duplicate */
					v->have_val = 1;
					v->kind = K_VAL;
				}
				continue;
			}
			if (!(k & C_TCHAR)) {
				v->bad = 1; /* includes obs-fold (a line starting with space) */
				break;
			}
			v->nlen = v->nlen + 1;
			continue;
		}
		/* the value */
		if (k & C_OWS) {
			if (!v->vstarted)
				continue;
			v->trail = v->trail + 1;
		} else {
			if (v->trail && v->kind != K_OTHER && v->kind != K_VAL)
				v->unparsed = 1; /* inner space in Host or Content-Length */
			if (v->trail && v->kind == K_CL) {
				v->bad = 1;
				break;
			}
			v->trail = 0;
		}
		v->vstarted = 1;
		__u32 vl = v->vlen;
		switch (v->kind) {
		case K_HOST:
			if (!(k & (C_OWS | C_HOST | C_UPPER)))
				v->unparsed = 1;
			s->host[vl & (MAX_HOST - 1)] = c | ((k & C_UPPER) ? 0x20 : 0);
			break;
		case K_VAL:
			s->val[vl & (MAX_VAL - 1)] = c;
			break;
		case K_CL:
			if (k & C_OWS)
				break;
			if (!(k & C_DIGIT) || v->ndig >= 6) {
				v->bad = 1;
				goto out;
			}
			v->ndig = v->ndig + 1;
			v->cl = v->cl * 10 + (c - '0');
			break;
		}
		v->vlen = vl + 1;
	}
out:
	return;
}

/* names: the header lines' names the fast path does not forward as they
 * are, read once the head is whole (in a loop of MAX_LINES, not in
 * frame()'s of MAX_HDR): framing and hop-by-hop headers make the
 * connection the proxy's (bad); forwarding headers, which the proxy
 * strips, hand the request up (unparsed). */
static __always_inline void names(struct scratch *s)
{
	volatile struct scratch *v = s;
	for (__u32 l = 1; l < MAX_LINES; l++) {
		if (l >= v->nl)
			break;
		__u32 st = s->ends[(l - 1) & (MAX_LINES - 1)] + 1;
		__u32 n = s->nlens[l & (MAX_LINES - 1)];
		__u64 w0 = NW(s, st, 0);
		__u64 w1 = NW(s, st, 1);
		__u64 w2 = NW(s, st, 2);
		if ((n == 17 && w0 == W('t', 'r', 'a', 'n', 's', 'f', 'e', 'r') &&
		     w1 == W('-', 'e', 'n', 'c', 'o', 'd', 'i', 'n') && (w2 & M(1)) == W('g', 0, 0, 0, 0, 0, 0, 0)) ||
		    (n == 10 && w0 == W('c', 'o', 'n', 'n', 'e', 'c', 't', 'i') &&
		     (w1 & M(2)) == W('o', 'n', 0, 0, 0, 0, 0, 0)) ||
		    (n == 7 && (w0 & M(7)) == W('u', 'p', 'g', 'r', 'a', 'd', 'e', 0)) ||
		    (n == 6 && (w0 & M(6)) == W('e', 'x', 'p', 'e', 'c', 't', 0, 0)) ||
		    (n == 2 && (w0 & M(2)) == W('t', 'e', 0, 0, 0, 0, 0, 0)) ||
		    (n == 7 && (w0 & M(7)) == W('t', 'r', 'a', 'i', 'l', 'e', 'r', 0)) ||
		    (n == 10 && w0 == W('k', 'e', 'e', 'p', '-', 'a', 'l', 'i') &&
		     (w1 & M(2)) == W('v', 'e', 0, 0, 0, 0, 0, 0)) ||
		    (n == 16 && w0 == W('p', 'r', 'o', 'x', 'y', '-', 'c', 'o') &&
		     w1 == W('n', 'n', 'e', 'c', 't', 'i', 'o', 'n'))) {
			v->bad = 1; /* framing or hop-by-hop: the proxy's, for good */
			return;
		}
		if ((n == 9 && w0 == W('f', 'o', 'r', 'w', 'a', 'r', 'd', 'e') &&
		     (w1 & M(1)) == W('d', 0, 0, 0, 0, 0, 0, 0)) ||
		    (w0 == W('x', '-', 'f', 'o', 'r', 'w', 'a', 'r') &&
		     ((n == 15 && (w1 & M(7)) == W('d', 'e', 'd', '-', 'f', 'o', 'r', 0)) ||
		      (n == 16 && w1 == W('d', 'e', 'd', '-', 'h', 'o', 's', 't')) ||
		      (n == 17 && w1 == W('d', 'e', 'd', '-', 'p', 'r', 'o', 't') &&
		       (w2 & M(1)) == W('o', 0, 0, 0, 0, 0, 0, 0)))) ||
		    (w0 == W('p', 'r', 'o', 'x', 'y', '-', 'a', 'u') &&
		     ((n == 19 && w1 == W('t', 'h', 'o', 'r', 'i', 'z', 'a', 't') &&
		       (w2 & M(3)) == W('i', 'o', 'n', 0, 0, 0, 0, 0)) ||
		      (n == 18 && w1 == W('t', 'h', 'e', 'n', 't', 'i', 'c', 'a') &&
		       (w2 & M(2)) == W('t', 'e', 0, 0, 0, 0, 0, 0))))) {
			/* The proxy strips or rewrites these (forwarding and
			 * proxy headers, issue 24): it forwards the request. */
			v->unparsed = 1;
		}
	}
}

/* request_line: method, path, version of line 0. */
static __always_inline void request_line(struct scratch *s)
{
	volatile struct scratch *v = s;
	__u32 end = s->ends[0] - 1; /* index of '\r' */
	__u32 p;
	if (B(s, 0) == 'G' && B(s, 1) == 'E' && B(s, 2) == 'T' && B(s, 3) == ' ') {
		v->method = 1 << 0;
		p = 4;
	} else if (B(s, 0) == 'P' && B(s, 1) == 'O' && B(s, 2) == 'S' && B(s, 3) == 'T' && B(s, 4) == ' ') {
		v->method = 1 << 2;
		p = 5;
	} else if (B(s, 0) == 'P' && B(s, 1) == 'U' && B(s, 2) == 'T' && B(s, 3) == ' ') {
		v->method = 1 << 3;
		p = 4;
	} else if (B(s, 0) == 'D' && B(s, 1) == 'E' && B(s, 2) == 'L' && B(s, 3) == 'E' && B(s, 4) == 'T' &&
		   B(s, 5) == 'E' && B(s, 6) == ' ') {
		v->method = 1 << 4;
		p = 7;
	} else {
		v->unparsed = 1;
		return;
	}
	if (B(s, p) != '/') {
		v->unparsed = 1;
		return;
	}
	v->path_len = 0;
	__u32 q = 0; /* past '?': the rest is not matched */
	__u32 k;
	for (k = 0; k < MAX_PATH; k++) {
		__u8 c = B(s, p + k);
		if (c == ' ')
			break;
		/* What the proxy would refuse or rewrite (l7/path.go) is its
		 * to judge: a tab (400), '%', '\\', and before the query "//"
		 * and a segment starting with '.' (a dot-segment, issue 24). */
		if (c == '#' || c == '%' || c == '\t' || c == '\\') {
			v->unparsed = 1;
			return;
		}
		if (c == '?')
			q = 1;
		if (!q && B(s, p + k - 1) == '/' && (c == '/' || c == '.')) {
			v->unparsed = 1;
			return;
		}
		if (!q) {
			s->path[k & (MAX_PATH - 1)] = c;
			v->path_len = k + 1;
		}
	}
	if (k == MAX_PATH) {
		v->unparsed = 1;
		return;
	}
	p += k;
	/* " HTTP/1.1" then the line's end. */
	if (p + 9 != end || B(s, p + 1) != 'H' || B(s, p + 2) != 'T' || B(s, p + 3) != 'T' ||
	    B(s, p + 4) != 'P' || B(s, p + 5) != '/' || B(s, p + 6) != '1' || B(s, p + 7) != '.' ||
	    B(s, p + 8) != '1')
		v->unparsed = 1;
}

/* match_bytes: d_match stays 1 when a[0..n) == b[0..n); n <= bound. */
static __always_inline void match_bytes(volatile struct scratch *v, const __u8 *a, const __u8 *b, __u32 n, __u32 bound,
					__u32 bmask)
{
	for (__u32 k = 0; k < bound; k++) {
		if (k >= n)
			break;
		if (a[k] != b[k & bmask]) {
			v->d_match = 0;
			break;
		}
	}
}

/* decide: RBAC then route then ring then pool; sets c->reason/target/route. */
static __always_inline void decide(struct scratch *s, struct policy *pol, struct conn *c, __u64 cookie)
{
	volatile struct scratch *v = s;
	struct ctl *ctl = bpf_map_lookup_elem(&ctls, &cookie);
	if (!ctl) {
		c->reason = R_UNKNOWN;
		return;
	}
	if (c->passed != ctl->expected || c->fast != ctl->done) {
		c->reason = R_BUSY;
		return;
	}
	if (s->unparsed || !s->have_host) {
		c->reason = R_UNPARSED;
		return;
	}
	if (pol->set_header) {
		c->reason = R_POLICY;
		return;
	}
	if (!s->have_val)
		v->val_len = 0;
	for (__u32 i = 0; i < MAX_RULES; i++) {
		if (i >= pol->n_rules)
			break;
		struct rule *r = &pol->rules[i];
		if (r->methods && !(r->methods & v->method))
			continue;
		if (r->src_bit != 0xff && !(ctl->src_mask & (1u << (r->src_bit & 31))))
			continue;
		v->d_match = 1;
		if (r->prefix_len) {
			if (r->prefix_len > v->path_len)
				continue;
			match_bytes(v, r->prefix, s->path, r->prefix_len, MAX_PREFIX, MAX_PATH - 1);
		}
		if (r->has_value) {
			if (r->value_len != v->val_len)
				continue;
			match_bytes(v, r->value, s->val, r->value_len, MAX_VAL, MAX_VAL - 1);
		}
		if (!v->d_match)
			continue;
		if (r->deny) {
			c->reason = R_DENY;
			return;
		}
		break;
	}
	v->d_best = 0xff;
	v->d_score = 0;
	for (__u32 i = 0; i < MAX_ROUTES; i++) {
		if (i >= pol->n_routes)
			break;
		struct route *rt = &pol->routes[i];
		v->d_match = 1;
		if (rt->host_len) {
			if (rt->host_len != v->host_len)
				continue;
			match_bytes(v, rt->host, s->host, rt->host_len, MAX_HOST, MAX_HOST - 1);
		}
		if (rt->prefix_len > v->path_len)
			continue;
		match_bytes(v, rt->prefix, s->path, rt->prefix_len, MAX_PREFIX, MAX_PATH - 1);
		if (!v->d_match)
			continue;
		__u32 score = rt->prefix_len + 1 + (rt->host_len ? (1 << 16) : 0);
		if (score > v->d_score) {
			v->d_best = i;
			v->d_score = score;
		}
	}
	__u32 best = v->d_best;
	if (best == 0xff) {
		c->reason = R_NOROUTE;
		return;
	}
	v->d_hash = 2166136261u;
	if (pol->hash) {
		for (__u32 k = 0; k < MAX_VAL; k++) {
			if (k >= v->val_len)
				break;
			v->d_hash = (v->d_hash ^ s->val[k]) * 16777619u;
		}
	}
	__u32 slot = (best & (MAX_ROUTES - 1)) * RING_SLOTS + (v->d_hash % RING_SLOTS);
	__u32 *backend = bpf_map_lookup_elem(&ring, &slot);
	if (!backend) {
		c->reason = R_POLICY;
		return;
	}
	struct pool_key pk = {.client = cookie, .backend = *backend};
	__u64 *up = bpf_map_lookup_elem(&pool, &pk);
	if (!up) {
		c->reason = R_MISS;
		return;
	}
	c->reason = R_FAST;
	c->target = *up;
	c->route = best;
}

SEC("sk_skb/stream_parser")
int l7_parse(struct __sk_buff *skb)
{
	__u32 len = skb->len;
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct conn *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c)
		return len;
	c->target = 0;
	if (c->sticky) {
		c->reason = R_STICKY_MORE;
		c->msg_len = len;
		return len;
	}
	if (c->crlf) {
		/* Go's server drops up to 4 CR/LF bytes after a POST (RFC
		 * 9112 2.2's tolerance; net/http server.go readRequest); the
		 * proxy did not see the POST the kernel took, so the kernel
		 * drops them here (a message of them alone: one that goes on
		 * into a request is passed whole, sticky as ever). */
		__u32 k = 0;
		for (__u32 i = 0; i < 4; i++) {
			__u8 ch = 0;
			if (i >= c->crlf || i >= len || bpf_skb_load_bytes(skb, i, &ch, 1) < 0 || (ch != '\r' && ch != '\n'))
				break;
			k++;
		}
		if (k && k == len) {
			c->crlf -= k;
			c->reason = R_CRLF;
			c->msg_len = k;
			return k;
		}
		c->crlf = 0;
		/* Read the length again: the checks above narrowed this
		 * copy, and the verifier would walk frame() once per range. */
		len = *(volatile __u32 *)&skb->len;
	}
	__u32 zero = 0;
	struct policy *pol = bpf_map_lookup_elem(&policies, &zero);
	struct scratch *s = bpf_map_lookup_elem(&scratch, &cookie);
	if (!pol || !s || !pol->enabled)
		return go_sticky(c, len);
	__u32 n = len;
	if (n > MAX_HDR)
		n = MAX_HDR;
	if (n < 1)
		return 0;
	n = ((n - 1) & (MAX_HDR - 1)) + 1; /* [1, MAX_HDR], as the verifier sees it */
	if (bpf_skb_load_bytes(skb, 0, s->buf, n) < 0)
		return go_sticky(c, len);
	s->n = n;
	frame(s, pol);
	if (s->bad)
		return go_sticky(c, len);
	/* One call (each call inlined is verified again: two cost 222k of
	 * the 1M instructions processed). */
	if (s->nl >= 1)
		request_line(s);
	if (!s->hdr_end) {
		/* The proxy answers a bad request line (or header) before the
		 * headers end: what it would answer early must not wait here. */
		if (s->nl >= 1 && s->unparsed)
			return go_sticky(c, len);
		if (len >= MAX_HDR)
			return go_sticky(c, len); /* headers beyond the bound */
		return 0;                         /* wait for more */
	}
	names(s);
	if (s->bad)
		return go_sticky(c, len);
	/* A Content-Length with a leading zero: the proxy forwards the
	 * number, not the digits (issue 24's differential suite). */
	if ((s->ndig > 1 && s->cl < 10) || (s->ndig > 2 && s->cl < 100) || (s->ndig > 3 && s->cl < 1000) ||
	    (s->ndig > 4 && s->cl < 10000) || (s->ndig > 5 && s->cl < 100000))
		s->unparsed = 1;
	if (s->cl > MAX_BODY)
		return go_sticky(c, len);
	__u32 msg = s->hdr_end + s->cl;
	/* The parser reads its skb from the start of the segment the message
	 * began in, not from the message (strparser keeps that offset to
	 * itself): so every message must begin a segment. A request is taken
	 * only when it ends where the data seen ends; data beyond it (a
	 * pipelined request in the same segment) makes the rest of the
	 * connection the proxy's, passed whole. */
	if (msg < len)
		return go_sticky(c, len);
	decide(s, pol, c, cookie);
	if (msg > len) {
		/* The body has not all come. The proxy answers what it would
		 * not forward (400, 403, 404, 505) once it has the head (issue
		 * 24: such a head waited here for a body that never came): the
		 * connection is the proxy's from here. A request it would
		 * forward waits for its body, and is then taken or handed up
		 * whole, so a pool miss does not cost the connection its
		 * fast path. */
		if (c->reason == R_DENY || c->reason == R_NOROUTE || c->reason == R_UNPARSED)
			return go_sticky(c, len);
		c->target = 0;
		return 0;
	}
	c->msg_len = msg;
	return msg;
}

SEC("sk_skb/stream_verdict")
int l7_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct conn *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c) {
		/* A connection being closed (user space forgot its state
		 * first): its last messages go to the proxy as every other. */
		count(R_UNKNOWN);
		return pass(skb, cookie);
	}
	if (c->reason == R_CRLF) {
		count(R_CRLF);
		return SK_DROP;
	}
	if (c->target) {
		__u64 key = c->target;
		if (have_lookup) {
			/* A pooled socket the backend closed (FIN seen: no longer
			 * established) is gone for this request: the proxy answers
			 * it as it would alone (the user-space reader empties the
			 * pool slot when it sees the close). */
			struct bpf_sock *sk = bpf_map_lookup_elem(&upstreams, &key);
			if (!sk) {
				c->passed++;
				c->passed_bytes += c->msg_len;
				count(R_REDIRECT_GONE);
				return pass(skb, cookie);
			}
			__u32 state = sk->state;
			bpf_sk_release(sk);
			if (state != BPF_TCP_ESTABLISHED) {
				c->passed++;
				c->passed_bytes += c->msg_len;
				count(R_REDIRECT_GONE);
				return pass(skb, cookie);
			}
		}
		if (bpf_sk_redirect_hash(skb, &upstreams, &key, 0) != SK_PASS) {
			/* Not in the sockhash (any more): the proxy answers. */
			c->passed++;
			c->passed_bytes += c->msg_len;
			count(R_REDIRECT_GONE);
			return pass(skb, cookie);
		}
		c->fast++;
		c->fast_up = key;
		/* A POST: the CR/LF bytes after it are dropped (l7_parse). */
		__u8 m[2] = {0, 0};
		bpf_skb_load_bytes(skb, 0, m, 2);
		c->crlf = m[0] == 'P' && m[1] == 'O' ? 4 : 0;
		count(R_FAST);
		count(R_MAX + (c->route & (MAX_ROUTES - 1)));
		return SK_PASS;
	}
	c->crlf = 0; /* the proxy drops what follows a POST it reads itself */
	if (c->reason != R_STICKY_MORE && c->reason != R_STICKY)
		c->passed++;
	c->passed_bytes += c->msg_len;
	count(c->reason);
	return pass(skb, cookie);
}
