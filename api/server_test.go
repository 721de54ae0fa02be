package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

const bearer = "Bearer " + testToken

func TestBadRequestsChangeNothing(t *testing.T) {
	e := newEnv(t, api.Options{MaxBody: 4096})
	ctx := context.Background()
	c := e.client()
	// Some state to protect.
	_, err := c.Add(ctx, lists.AllowList, []string{"198.18.10.0/24", "2001:db8:a::/48"})
	require.NoError(t, err, "Add allow")
	_, err = c.Add(ctx, lists.DenyList, []string{"198.19.0.0/16", "2001:db8:dead::/48"})
	require.NoError(t, err, "Add deny")
	good := `{"rate":50,"burst":100,"admission_rate":500,"admission_burst":1000,"dry_run":false,"protected":["tcp/443"],"unprotected":{"rate":250000,"burst":250000,"admission_rate":10000,"admission_burst":10000},"key_prefix4":32,"key_prefix6":64}`
	code, body := e.do(t, "PUT", "/v1/limits", bearer, good)
	require.Equal(t, 200, code, "PUT good limits = %d %s, want 200", code, body)
	before := e.state(t)
	require.False(t, len(before.lists["in4"]) == 0 || len(before.lists["in6"]) == 0, "state() saw no list entries: %v", before.lists)
	t.Logf("state guarded: config slot %d, list maps %d", before.configSlot, len(before.lists))
	beforeLimits := e.sh.Limits()

	huge := `{"prefixes":["` + strings.Repeat("1", 5000) + `"]}`
	cases := []struct {
		name, method, path, token, body string
		code                            int
		want                            string // in the error message
	}{
		{"no token", "PUT", "/v1/limits", "", good, 401, "missing bearer token"},
		{"wrong token", "PUT", "/v1/limits", "Bearer nope", good, 401, "invalid token"},
		{"token prefix", "PUT", "/v1/limits", bearer[:len(bearer)-1], good, 401, "invalid token"},
		{"basic scheme", "POST", "/v1/deny", "Basic " + testToken, `{"prefixes":["198.18.0.0/24"]}`, 401, "missing bearer token"},
		{"no token allow", "POST", "/v1/allow", "", `{"prefixes":["198.18.0.0/24"]}`, 401, "missing bearer token"},
		{"no token delete", "DELETE", "/v1/deny", "", `{"prefixes":["198.19.0.0/16"]}`, 401, "missing bearer token"},
		{"malformed JSON", "PUT", "/v1/limits", bearer, `{"rate": 5,`, 400, "malformed JSON"},
		{"not JSON", "PUT", "/v1/limits", bearer, `rate=5`, 400, "malformed JSON"},
		{"empty body", "PUT", "/v1/limits", bearer, ``, 400, "empty request body"},
		{"trailing data", "PUT", "/v1/limits", bearer, good + `{}`, 400, "trailing data"},
		{"unknown field", "PUT", "/v1/limits", bearer, `{"rate":5,"burst":5,"admission_rate":5,"admission_burst":5,"colour":"red"}`, 400, `unknown field "colour"`},
		{"rate 0", "PUT", "/v1/limits", bearer, `{"rate":0,"burst":5,"admission_rate":5,"admission_burst":5,"dry_run":false,"protected":["tcp/443"],"unprotected":{"rate":250000,"burst":250000,"admission_rate":10000,"admission_burst":10000},"key_prefix4":32,"key_prefix6":64}`, 400, "rate 0 out of range"},
		{"missing fields", "PUT", "/v1/limits", bearer, `{"rate":5}`, 400, `missing fields "burst", "admission_rate", "admission_burst", "dry_run"`},
		// Issue 10, finding 7: what encoding/json quietly accepts.
		{"omitted dry_run", "PUT", "/v1/limits", bearer, `{"rate":50,"burst":100,"admission_rate":500,"admission_burst":1000,"protected":["tcp/443"],"unprotected":{"rate":250000,"burst":250000,"admission_rate":10000,"admission_burst":10000},"key_prefix4":32,"key_prefix6":64}`, 400, `missing field "dry_run"`},
		{"duplicate key", "PUT", "/v1/limits", bearer, `{"rate":50,"burst":100,"admission_rate":500,"admission_burst":1000,"dry_run":false,"rate":1}`, 400, `duplicate key "rate"`},
		{"key case", "PUT", "/v1/limits", bearer, `{"Rate":50,"burst":100,"admission_rate":500,"admission_burst":1000,"dry_run":false}`, 400, `key "Rate": did you mean "rate"?`},
		{"duplicate prefixes key", "POST", "/v1/deny", bearer, `{"prefixes":["198.18.60.0/24"],"prefixes":["198.18.61.0/24"]}`, 400, `duplicate key "prefixes"`},
		{"malformed query", "GET", "/v1/top?n=%zz", "", "", 400, "malformed query string"},
		{"malformed query semicolon", "GET", "/v1/top?n=3;by=packets", "", "", 400, "malformed query string"},
		{"negative burst", "PUT", "/v1/limits", bearer, `{"rate":5,"burst":-1,"admission_rate":5,"admission_burst":5}`, 400, `field "burst": number -1 is not a valid non-negative integer`},
		{"fractional rate", "PUT", "/v1/limits", bearer, `{"rate":1.5,"burst":5,"admission_rate":5,"admission_burst":5}`, 400, `field "rate"`},
		{"rate too big", "PUT", "/v1/limits", bearer, `{"rate":1000000000000,"burst":5,"admission_rate":5,"admission_burst":5,"dry_run":false,"protected":["tcp/443"],"unprotected":{"rate":250000,"burst":250000,"admission_rate":10000,"admission_burst":10000},"key_prefix4":32,"key_prefix6":64}`, 400, "rate 1000000000000 out of range"},
		{"string rate", "PUT", "/v1/limits", bearer, `{"rate":"5","burst":5,"admission_rate":5,"admission_burst":5}`, 400, `field "rate"`},
		{"dry_run not bool", "PUT", "/v1/limits", bearer, `{"rate":5,"burst":5,"admission_rate":5,"admission_burst":5,"dry_run":1}`, 400, `field "dry_run"`},
		{"oversized limits", "PUT", "/v1/limits", bearer, `{"rate":5,"burst":5,"admission_rate":5,"admission_burst":5,"dry_run":false` + strings.Repeat(" ", 5000) + `}`, 400, "exceeds 4096 bytes"},
		{"oversized prefixes", "POST", "/v1/deny", bearer, huge, 400, "exceeds 4096 bytes"},
		{"bad CIDR among good", "POST", "/v1/deny", bearer, `{"prefixes":["198.18.20.0/24","198.18.300.0/24","2001:db8:1::/48"]}`, 400, `"198.18.300.0/24" is not an address or CIDR`},
		{"host bits", "POST", "/v1/allow", bearer, `{"prefixes":["198.18.30.0/24","198.18.0.1/16"]}`, 400, "host bits set"},
		{"bad IPv6 among good", "POST", "/v1/allow", bearer, `{"prefixes":["2001:db8:2::/48","2001:db8::zz/64"]}`, 400, `"2001:db8::zz/64"`},
		{"no prefixes", "POST", "/v1/deny", bearer, `{"prefixes":[]}`, 400, "at least one CIDR"},
		{"prefixes not array", "POST", "/v1/deny", bearer, `{"prefixes":"198.18.0.0/24"}`, 400, `field "prefixes"`},
		{"unknown field list", "POST", "/v1/deny", bearer, `{"prefixes":["198.18.40.0/24"],"ttl":5}`, 400, `unknown field "ttl"`},
		{"delete not listed", "DELETE", "/v1/deny", bearer, `{"prefixes":["198.19.0.0/16","198.18.50.0/24"]}`, 400, "not on the deny list: 198.18.50.0/24"},
		{"delete bad CIDR", "DELETE", "/v1/allow", bearer, `{"prefixes":["198.18.10.0/24","nonsense"]}`, 400, `"nonsense"`},
		{"top n 0", "GET", "/v1/top?n=0", "", "", 400, "n=\"0\""},
		{"top n too big", "GET", "/v1/top?n=1001", "", "", 400, "[1, 1000]"},
		{"top n negative", "GET", "/v1/top?n=-3", "", "", 400, "n=\"-3\""},
		{"top by", "GET", "/v1/top?by=bytes", "", "", 400, `unknown order "bytes"`},
		{"top param", "GET", "/v1/top?limit=3", "", "", 400, `unknown query parameter "limit"`},
		{"no endpoint", "GET", "/v1/nothing", "", "", 404, "no such endpoint"},
		{"wrong method", "PATCH", "/v1/limits", bearer, good, 405, "not allowed"},
	}
	ran := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran++
			code, body := e.do(t, tc.method, tc.path, tc.token, tc.body)
			var er api.ErrorResponse
			assert.NoError(t, json.Unmarshal([]byte(body), &er), "%s %s answered %q, not a JSON error", tc.method, tc.path, body)
			assert.False(t, code != tc.code || !strings.Contains(er.Error, tc.want), "%s %s = %d %s, want %d with %q", tc.method, tc.path, code, strings.TrimSpace(body), tc.code, tc.want)
			after := e.state(t)
			assert.True(t, reflect.DeepEqual(before, after), "state changed:\nbefore %+v\nafter  %+v", before, after)
			got := e.sh.Limits()
			assert.True(t, got.Equal(beforeLimits), "Limits() = %+v, want %+v", got, beforeLimits)
		})
	}
	require.False(t, ran == 0, "no case ran")
	logs := e.log.String()
	n := strings.Count(logs, "api unauthorized")
	assert.Equal(t, 6, n, "logged %d unauthorized requests, want 6:\n%s", n, logs)
}

func TestChangesLogged(t *testing.T) {
	e := newEnv(t, api.Options{})
	ctx := context.Background()
	c := e.client()
	old := e.sh.Limits()
	nl := config.Limits{Rate: 7, Burst: 9, AdmissionRate: 11, AdmissionBurst: 13, DryRun: true}
	ch, err := c.SetLimits(ctx, nl)
	require.NoError(t, err, "SetLimits")
	assert.False(t, !ch.Old.Equal(old) || !ch.New.Equal(nl), "SetLimits = %+v, want old %+v new %+v", ch, old, nl)
	got, _ := c.Limits(ctx)
	assert.True(t, got.Equal(nl), "Limits() = %+v, want %+v", got, nl)
	st := e.state(t)
	assert.False(t, st.config.Source.Rate != 7 || st.config.Admission.Rate != 11 || st.config.Flags&1 == 0, "config map = %+v, want rate 7, admission 11, dry-run", st.config)
	r, err := c.Add(ctx, lists.DenyList, []string{"198.18.0.0/24", "2001:db8::/48", "198.18.0.0/24"})
	require.NoError(t, err, "Add")
	wantAdd := []string{"198.18.0.0/24", "2001:db8::/48"}
	assert.False(t, !slices.Equal(r.Prefixes, wantAdd) || !slices.Equal(r.Added, wantAdd), "Add = %+v, want prefixes and added %v", r, wantAdd)
	require.False(t, len(st.lists["in4"]) != 0, "the IPv4 verdict trie in force had entries before Add")
	after := e.state(t)
	assert.False(t, len(after.lists["in4"]) != 1 || len(after.lists["in6"]) != 1, "verdict tries = %v, want one entry each in force for IPv4 and IPv6", after.lists)
	r, err = c.Remove(ctx, lists.DenyList, []string{"2001:db8::/48"})
	require.NoError(t, err, "Remove")
	wantRemove := []string{"198.18.0.0/24"}
	assert.True(t, slices.Equal(r.Prefixes, wantRemove), "Remove = %+v, want prefixes %v", r, wantRemove)
	logs := e.log.String()
	for _, want := range []string{
		`msg="limits changed" who=tester`, `old="{Rate:1000 Burst:2000`, `new="{Rate:7 Burst:9`,
		`msg="list changed" who=tester`, `what="deny add" prefixes="[198.18.0.0/24 2001:db8::/48]" old=0 new=2`,
		`what="deny del" prefixes=[2001:db8::/48] old=2 new=1`,
	} {
		assert.Contains(t, logs, want, "logs lack %q:\n%s", want, logs)
	}
}

// population writes up to n sources with random counts straight into the
// pinned table and returns what it wrote (a source whose set is full is
// left out).
func population(t *testing.T, e *env, n int, seed uint64) []source.Source {
	t.Helper()
	tab, err := shield.OpenTable(e.dir)
	require.NoError(t, err)
	defer tab.Close()
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]source.Source, 0, n)
	base4 := netip.MustParseAddr("198.18.0.0").As4()
	for i := 0; i < n; i++ {
		var a netip.Addr
		if i%4 == 3 {
			b := netip.MustParseAddr("2001:db8::").As16()
			b[12], b[13], b[14], b[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			a = netip.AddrFrom16(b)
		} else {
			b := base4
			b[1], b[2], b[3] = 18+byte(i>>16)&1, byte(i>>8), byte(i)
			a = netip.AddrFrom4(b)
			if i>>17 > 0 {
				// Beyond 2^17 the /15 is exhausted: spread over the
				// IPv6 range instead.
				bb := netip.MustParseAddr("2001:db8:1::").As16()
				bb[12], bb[13], bb[14], bb[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
				a = netip.AddrFrom16(bb)
			}
		}
		v := bpf.ShieldSource{Passed: rng.Uint64N(1000), Dropped: rng.Uint64N(1000)}
		v.Bucket.Credit = int64(rng.Uint64N(3)) * 1_000_000_000 // 0: limited
		err := tab.Put(srcKey(a), v)
		if errors.Is(err, shield.ErrSetFull) {
			continue // the set of a source of a full table: not tracked
		}
		require.NoError(t, err, "fill sources")
		bits := config.DefaultKeyPrefix6
		if a.Is4() {
			bits = config.DefaultKeyPrefix4
		}
		prefix, _ := a.Prefix(bits)
		out = append(out, source.Source{Addr: a, Prefix: prefix, Passed: v.Passed, Dropped: v.Dropped, Limited: v.Bucket.Credit < 1_000_000_000})
	}
	return out
}

func expectTop(pop []source.Source, n int, by source.TopOrder) []source.Source {
	score := func(s source.Source) uint64 {
		if by == source.ByPassed {
			return s.Passed
		}
		return s.Dropped
	}
	var c []source.Source
	for _, s := range pop {
		if score(s) > 0 {
			c = append(c, s)
		}
	}
	slices.SortFunc(c, func(a, b source.Source) int {
		if sa, sb := score(a), score(b); sa != sb {
			if sa > sb {
				return -1
			}
			return 1
		}
		if ta, tb := a.Passed+a.Dropped, b.Passed+b.Dropped; ta != tb {
			if ta > tb {
				return -1
			}
			return 1
		}
		return a.Addr.Compare(b.Addr)
	})
	return c[:min(n, len(c))]
}

func TestTopTalkers(t *testing.T) {
	e := newEnv(t, api.Options{})
	pop := population(t, e, 20000, 42)
	c := e.client()
	for _, tc := range []struct {
		n  int
		by source.TopOrder
	}{{1, source.ByDropped}, {10, source.ByDropped}, {10, source.ByPassed}, {1000, source.ByPassed}, {1000, source.ByDropped}} {
		t.Run(fmt.Sprintf("%d-%s", tc.n, tc.by), func(t *testing.T) {
			got, err := c.Top(context.Background(), tc.n, tc.by)
			require.NoError(t, err, "Top")
			assert.False(t, got.Scanned != len(pop), "Top scanned %d, want %d", got.Scanned, len(pop))
			want := expectTop(pop, tc.n, tc.by)
			if !reflect.DeepEqual(got.Sources, want) {
				for i := range min(len(want), len(got.Sources)) {
					require.False(t, got.Sources[i] != want[i], "Top(%d, %s)[%d] = %+v, want %+v (len %d, want %d)", tc.n, tc.by, i, got.Sources[i], want[i], len(got.Sources), len(want))
				}
				require.Fail(t, fmt.Sprintf("Top(%d, %s) has %d sources, want %d", tc.n, tc.by, len(got.Sources), len(want)))
			}
		})
	}
	cr, err := c.Counters(context.Background())
	require.NoError(t, err, "Counters")
	assert.False(t, cr.Sources.Tracked != len(pop) || cr.Sources.Capacity != tableSize, "Counters().Sources = %+v, want %d of %d", cr.Sources, len(pop), tableSize)
}

func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found (Debian package prometheus; ci/deps.sh installs it)")
	e := newEnv(t, api.Options{Build: api.BuildInfo{Version: "test", Revision: "abc"}})
	c := e.client()
	ctx := context.Background()
	_, err = c.Add(ctx, lists.DenyList, []string{"198.18.5.0/24"})
	require.NoError(t, err)
	for _, src := range []string{"198.18.5.5", "198.18.5.6", "198.18.6.1"} {
		_, err := sim.Run(e.sh.Program(), udp4(src))
		require.NoError(t, err, "run program")
	}
	text, err := c.Metrics(ctx)
	require.NoError(t, err, "Metrics")
	// Bytes beside packets (issue 28): the frames' whole length.
	frameLen := len(udp4("198.18.5.5"))
	for _, want := range []string{
		fmt.Sprintf(`shield_bytes_total{proto="udp",reason="deny",verdict="drop"} %d`, 2*frameLen),
		fmt.Sprintf(`shield_bytes_total{proto="udp",reason="unprotected",verdict="pass"} %d`, frameLen),
		`shield_bytes_total{proto="tcp",reason="spoofed",verdict="drop"} 0`,
	} {
		assert.Contains(t, text, want, "metrics lack %q", want)
	}
	cr, err := c.Counters(ctx)
	require.NoError(t, err, "Counters")
	var denied api.PacketCount
	for _, pc := range cr.Packets {
		if pc.Verdict == "drop" && pc.Reason == "deny" && pc.Proto == "udp" {
			denied = pc
		}
	}
	assert.False(t, denied.Packets != 2 || denied.Bytes != uint64(2*frameLen), "GET /v1/counters drop/deny/udp = %+v, want 2 packets, %d bytes", denied, 2*frameLen)
	for _, want := range []string{
		`shield_packets_total{proto="udp",reason="deny",verdict="drop"} 2`,
		`shield_packets_total{proto="udp",reason="unprotected",verdict="pass"} 1`, // UDP to an ephemeral port: return traffic
		`shield_sources_tracked 1`,
		`shield_sources_capacity 4096`,
		`shield_limit_rate_packets_per_second{bucket="source"} 1000`,
		`shield_limit_burst_packets{bucket="admission"} 10000`,
		`shield_dry_run 0`,
		`shield_limit_rate_packets_per_second{bucket="unprotected"} 250000`,
		`shield_protected_destinations 3`,
		`shield_own_addresses{family="ipv4"} 0`,
		`shield_key_prefix_length{family="ipv6"} 64`,
		`shield_packets_total{proto="tcp",reason="spoofed",verdict="drop"} 0`,
		`shield_list_prefixes{family="ipv4",list="deny"} 1`,
		`shield_build_info{goversion="go`,
		`shield_api_requests_total{code="200"}`,
	} {
		assert.Contains(t, text, want, "metrics lack %q", want)
	}
	f := filepath.Join(t.TempDir(), "metrics.txt")
	require.NoError(t, os.WriteFile(f, []byte(text), 0o600))
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin, _ = os.Open(f)
	out, err := cmd.CombinedOutput()
	assert.False(t, err != nil, "promtool check metrics: %v\n%s\n--- metrics:\n%s", err, out, text)
}

func TestReadsNeedTokenWhenAsked(t *testing.T) {
	e := newEnv(t, api.Options{AuthReads: true})
	for _, p := range []string{"/v1/counters", "/v1/limits", "/v1/allow", "/v1/top", "/metrics"} {
		code, _ := e.do(t, "GET", p, "", "")
		assert.Equal(t, http.StatusUnauthorized, code, "GET %s without token = %d, want 401", p, code)
		code, body := e.do(t, "GET", p, bearer, "")
		assert.Equal(t, http.StatusOK, code, "GET %s with token = %d %s, want 200", p, code, body)
	}
}

// TestListCapacity: a batch that would take a list over its capacity gets
// 400 from the shield's own check (the list holds one prefix, the batch
// adds MaxListEntries more) and changes nothing.
func TestListCapacity(t *testing.T) {
	e := newEnv(t, api.Options{MaxBody: 4 << 20})
	code, resp := e.do(t, "POST", "/v1/deny", bearer, `{"prefixes":["203.0.113.0/24","2001:db8::/32"]}`)
	require.Equal(t, http.StatusOK, code, "POST /v1/deny = %d %s, want 200", code, resp)
	before := e.state(t)
	batch := make([]string, shield.MaxListEntries)
	for i := range batch {
		batch[i] = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
	}
	body, err := json.Marshal(api.PrefixesRequest{Prefixes: batch})
	require.NoError(t, err)
	code, answer := e.do(t, "POST", "/v1/deny", bearer, string(body))
	assert.False(t, code != http.StatusBadRequest || !strings.Contains(answer, "would hold 65537 IPv4 and 1 IPv6 prefixes; the limit is 65536 each"),
		"POST /v1/deny over capacity = %d %s, want 400 naming the limit", code, answer)
	after := e.state(t)
	assert.True(t, reflect.DeepEqual(before, after), "state changed after a refused over-capacity POST")
}

// TestConcurrentListChangesReportTheirOwn: list changes racing each other
// each answer with exactly the prefixes they added, not a neighbour's.
func TestConcurrentListChangesReportTheirOwn(t *testing.T) {
	e := newEnv(t, api.Options{})
	c := e.client()
	const workers, per = 16, 4
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			var mine []string
			for i := range per {
				mine = append(mine, fmt.Sprintf("198.19.%d.%d/32", w, i))
			}
			r, err := c.Add(context.Background(), lists.DenyList, mine)
			if err != nil {
				errs <- err
				return
			}
			if !slices.Equal(r.Added, mine) {
				errs <- fmt.Errorf("worker %d: Add(%v).Added = %v, want its own prefixes", w, mine, r.Added)
				return
			}
			errs <- nil
		}()
	}
	for range workers {
		assert.NoError(t, <-errs)
	}
	got, err := e.sh.List(lists.DenyList)
	assert.False(t, err != nil || len(got) != workers*per, "List(deny) = %d prefixes, %v; want %d", len(got), err, workers*per)
}

// TestMetricsIfaceLabel: a service's XDP metrics name its interface
// (iface="..."), so one Prometheus tells apart the shields of a host's
// interfaces; the API's own counter is no interface's.
func TestMetricsIfaceLabel(t *testing.T) {
	e := newEnv(t, api.Options{Info: api.Info{Iface: "eth9"}})
	c := e.client()
	ctx := context.Background()
	_, err := c.Limits(ctx)
	require.NoError(t, err)
	text, err := c.Metrics(ctx)
	require.NoError(t, err)
	for _, want := range []string{
		`shield_packets_total{iface="eth9",proto="udp",reason="deny",verdict="drop"} 0`,
		`shield_sources_tracked{iface="eth9"} 0`,
		`shield_sources_capacity{iface="eth9"} 4096`,
		`shield_attached{iface="eth9"} 1`,
		`shield_list_prefixes{family="ipv4",iface="eth9",list="deny"} 0`,
		`shield_api_requests_total{code="200"} 1`,
	} {
		assert.Contains(t, text, want)
	}
}

// TestListHits (issue 28): each list entry's hit count, the packets whose
// longest listed match it is, in GET /v1/deny and /v1/allow and in
// /metrics. A change of the lists keeps the counts of the prefixes it
// keeps; a prefix taken off and put back starts from zero.
func TestListHits(t *testing.T) {
	e := newEnv(t, api.Options{})
	c := e.client()
	ctx := context.Background()
	_, err := c.Add(ctx, lists.DenyList, []string{"198.18.0.0/16", "198.18.5.0/24"})
	require.NoError(t, err)
	_, err = c.Add(ctx, lists.AllowList, []string{"198.18.7.0/24"})
	require.NoError(t, err)
	send := func(src string, n int) {
		for range n {
			_, err := sim.Run(e.sh.Program(), udp4(src))
			require.NoError(t, err, "run program")
		}
	}
	send("198.18.1.1", 2)
	send("198.18.5.5", 3)
	send("198.18.7.7", 1)
	send("198.19.0.1", 4) // on no list
	hits := func(list string) map[string]uint64 {
		t.Helper()
		code, body := e.do(t, "GET", "/v1/"+list, bearer, "")
		require.Equal(t, 200, code, body)
		var r struct {
			Hits map[string]uint64 `json:"hits"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &r), body)
		return r.Hits
	}
	assert.Equal(t, map[string]uint64{"198.18.0.0/16": 2, "198.18.5.0/24": 3}, hits("deny"), "deny hits")
	assert.Equal(t, map[string]uint64{"198.18.7.0/24": 1}, hits("allow"), "allow hits")
	text, err := c.Metrics(ctx)
	require.NoError(t, err)
	for _, want := range []string{
		`shield_list_hits_total{list="deny",prefix="198.18.5.0/24"} 3`,
		`shield_list_hits_total{list="allow",prefix="198.18.7.0/24"} 1`,
	} {
		assert.True(t, strings.Contains(text, want), "metrics lack %q", want)
	}

	// A change keeps the counts of what it keeps.
	_, err = c.Add(ctx, lists.DenyList, []string{"2001:db8::/32"})
	require.NoError(t, err)
	_, err = c.Remove(ctx, lists.DenyList, []string{"198.18.5.0/24"})
	require.NoError(t, err)
	send("198.18.1.2", 1)
	assert.Equal(t, map[string]uint64{"198.18.0.0/16": 3, "2001:db8::/32": 0}, hits("deny"), "deny hits after two changes")
	_, err = c.Add(ctx, lists.DenyList, []string{"198.18.5.0/24"})
	require.NoError(t, err)
	send("198.18.5.5", 1)
	assert.Equal(t, map[string]uint64{"198.18.0.0/16": 3, "198.18.5.0/24": 1, "2001:db8::/32": 0}, hits("deny"), "a prefix put back starts from zero")
}
