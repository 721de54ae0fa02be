package api_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
)

const testToken = "s3cret-operator-token"

// tableSize is the sources table of newEnv's shields: small, as a table of
// shield.DefaultTableSize (a million preallocated LRU entries) costs seconds
// of memory setup per test in a VM under TCG and nothing here fills it.
const tableSize = 4096

// env is a shield loaded with its maps pinned in a per-test bpffs directory
// (removed at cleanup) and an API server in front of it.
type env struct {
	sh  *shield.Shield
	dir string
	srv *httptest.Server
	log *bytes.Buffer
}

func newEnv(t *testing.T, opts api.Options) *env {
	t.Helper()
	testutil.Root(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(dir), "EnsureBPFFS")
	t.Cleanup(func() { os.RemoveAll(dir) })
	sh, err := shield.Load(shield.Options{TableSize: tableSize, Clock: config.ClockVirtual, PinPath: dir})
	require.NoError(t, err, "Load")
	t.Cleanup(func() { sh.Close() })
	var logs bytes.Buffer
	if opts.Token == "" {
		opts.Token = testToken
	}
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	opts.NoProcessMetrics = true
	srv := httptest.NewServer(api.NewServer(sh, opts))
	t.Cleanup(srv.Close)
	return &env{sh: sh, dir: dir, srv: srv, log: &logs}
}

func (e *env) client() *client.Client {
	return &client.Client{Base: e.srv.URL, Token: testToken, Operator: "tester"}
}

// pinned opens one of the shield's pinned maps.
func (e *env) pinned(t *testing.T, name string) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(e.dir, name), nil)
	require.NoError(t, err, "open pinned %s", name)
	t.Cleanup(func() { m.Close() })
	return m
}

// do sends a raw request and returns status and body.
func (e *env) do(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// state is everything a change could touch, read from the maps themselves:
// the configuration in force and every entry of every list map (both
// generations of the verdict tries, and the one in force), as raw bytes.
type state struct {
	config     bpf.ShieldConfig
	configSlot ebpf.MapID
	lists      map[string][]string
}

// listMaps are the pinned maps that hold list entries: both generations
// of the verdict tries.
var listMaps = []string{bpf.ShieldMapLists4, bpf.ShieldMapLists6, bpf.ShieldMapLists4B, bpf.ShieldMapLists6B}

func (e *env) state(t *testing.T) state {
	t.Helper()
	st := state{lists: map[string][]string{}}
	outer := e.pinned(t, bpf.ShieldMapConfigMap)
	require.NoError(t, outer.Lookup(uint32(0), &st.configSlot), "read config slot")
	inner, err := ebpf.NewMapFromID(st.configSlot)
	require.NoError(t, err, "open config map")
	defer inner.Close()
	require.NoError(t, inner.Lookup(uint32(0), &st.config), "read config")
	for _, name := range listMaps {
		if _, err := os.Stat(filepath.Join(e.dir, name)); err != nil {
			continue // not in this version of the program
		}
		var k, v []byte
		it := e.pinned(t, name).Iterate()
		for it.Next(&k, &v) {
			st.lists[name] = append(st.lists[name], fmt.Sprintf("%x=%x", k, v))
		}
		require.NoError(t, it.Err(), "walk %s", name)
		slices.Sort(st.lists[name])
	}
	// The generation in force, as "in4" and "in6".
	in4, in6 := bpf.ShieldMapLists4, bpf.ShieldMapLists6
	if st.config.Flags&uint32(bpf.ShieldConfigFlagCONFIG_LISTS_B) != 0 {
		in4, in6 = bpf.ShieldMapLists4B, bpf.ShieldMapLists6B
	}
	st.lists["in4"], st.lists["in6"] = st.lists[in4], st.lists[in6]
	return st
}

// udp4 builds an Ethernet/IPv4/UDP frame from src.
func udp4(src string) []byte {
	a := netip.MustParseAddr(src).As4()
	var b bytes.Buffer
	b.Write([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00})
	ip := []byte{0x45, 0, 0, 28 + 4, 0, 0, 0, 0, 64, 17, 0, 0}
	b.Write(ip)
	b.Write(a[:])
	b.Write([]byte{198, 18, 0, 1})
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 40009) // an ephemeral port: return traffic
	binary.BigEndian.PutUint16(udp[4:], 12)
	b.Write(udp)
	b.Write([]byte("ping"))
	return b.Bytes()
}

// srcKey is the sources-table key of an address.
func srcKey(a netip.Addr) bpf.ShieldSrcKey {
	return bpf.ShieldSrcKey{Addr: a.As16()} // IPv4 as ::ffff:a.b.c.d
}
