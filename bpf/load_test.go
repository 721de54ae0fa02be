package bpf_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestLoadVariables: Load sets the switches on a copy (the caller's spec
// keeps its values) and refuses a name the program lacks, before loading.
func TestLoadVariables(t *testing.T) {
	spec, err := bpf.LoadProbe()
	require.NoError(t, err)
	err = bpf.Load(spec, map[string]any{"no_such_switch": uint8(1)}, &bpf.ProbeObjects{}, nil)
	assert.ErrorContains(t, err, "set no_such_switch: no such variable")
	err = bpf.Load(spec, map[string]any{bpf.ProbeVarServerPort: "not a port"}, &bpf.ProbeObjects{}, nil)
	assert.ErrorContains(t, err, "set "+bpf.ProbeVarServerPort)

	testutil.Root(t)
	require.NoError(t, rlimit.RemoveMemlock())
	var objs bpf.ProbeObjects
	require.NoError(t, bpf.Load(spec, map[string]any{bpf.ProbeVarServerPort: uint16(8443)}, &objs, nil))
	defer objs.Close()
	var port uint16
	require.NoError(t, objs.ServerPort.Get(&port))
	assert.Equal(t, uint16(8443), port, "server_port of the loaded program")
	var before uint16
	require.NoError(t, spec.Variables[bpf.ProbeVarServerPort].Get(&before))
	assert.Zero(t, before, "server_port of the caller's spec after Load")
}

// TestLoadVerifierLog: a program the verifier refuses fails with the whole
// log in the message, and the error still matches *ebpf.VerifierError.
func TestLoadVerifierLog(t *testing.T) {
	testutil.Root(t)
	require.NoError(t, rlimit.RemoveMemlock())
	// Ten moves, then an exit with R0 never written ("R0 !read_ok"): a log
	// long enough that its short form leaves the first lines out.
	var insns asm.Instructions
	for i := range 10 {
		insns = append(insns, asm.Mov.Imm(asm.R1, int32(i)))
	}
	insns = append(insns, asm.Return())
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"refused": {Name: "refused", Type: ebpf.XDP, License: "GPL", Instructions: insns},
	}}
	var objs struct {
		Prog *ebpf.Program `ebpf:"refused"`
	}
	err := bpf.Load(spec, nil, &objs, nil)
	require.Error(t, err)
	var ve *ebpf.VerifierError
	assert.True(t, errors.As(err, &ve), "errors.As(%v, *ebpf.VerifierError)", err)
	assert.Contains(t, err.Error(), "R0 !read_ok")
	assert.Contains(t, err.Error(), "0: (b7) r1 = 0", "the log's first instruction, not only its last lines")
}
