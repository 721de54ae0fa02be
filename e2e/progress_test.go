package e2e

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/workbench"
)

// TestProgressJSON: a line of `shieldlab storm -progress-json` is what
// the workbench reads (workbench.StormProgress), latencies in ms by kind.
func TestProgressJSON(t *testing.T) {
	p := Progress{Phase: "few-sources", Elapsed: 1500 * time.Millisecond, Length: 3 * time.Second, SentPPS: 10000,
		DropPPS: map[string]float64{"limit": 9000}, PassPPS: 40, Requests: 12, Failures: 1, APIOK: true, Sources: 7, Shield: true}
	p.P50[parts.KeepAlive], p.P99[parts.KeepAlive] = 400*time.Microsecond, 2500*time.Microsecond
	var got workbench.StormProgress
	dec := json.NewDecoder(bytes.NewReader(ProgressJSON(p)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got))
	require.Equal(t, workbench.StormProgress{Phase: "few-sources", Shield: true, Elapsed: 1.5, Length: 3, SentPPS: 10000,
		PassPPS: 40, DropPPS: map[string]float64{"limit": 9000},
		P50Ms:    map[string]float64{"new_conn": 0, "keep_alive": 0.4, "udp": 0},
		P99Ms:    map[string]float64{"new_conn": 0, "keep_alive": 2.5, "udp": 0},
		Requests: 12, Failures: 1, APIOK: true, Sources: 7}, got)
}
