package lb

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapStates reads the state counters, for checkStates.
func (e *env) snapStates(t *testing.T) StateCounters {
	t.Helper()
	c, err := e.lb.StateCounters()
	require.NoError(t, err)
	return c
}

// checkStates: since before, created and released states grew by what the
// caller's sockets did, and nothing was evicted or missed.
func (e *env) checkStates(t *testing.T, before StateCounters, created, released uint64) {
	t.Helper()
	now := e.snapStates(t)
	got := StateCounters{Created: now.Created - before.Created, Released: now.Released - before.Released,
		Evicted: now.Evicted - before.Evicted, Missed: now.Missed - before.Missed}
	if want := (StateCounters{Created: created, Released: released}); got != want {
		assert.Fail(t, fmt.Sprintf("state counters grew by %+v, want %+v (%s)", got, want, e.lb.StateMode()))
	}
}
