package api

import "xdpshield/shield"

// PacketCount is one counter: packets given verdict for reason and proto,
// summed over CPUs.
type PacketCount struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Proto   string `json:"proto"`
	Packets uint64 `json:"packets"`
}

// SourceStats says how full the per-source table is.
type SourceStats struct {
	Tracked  int    `json:"tracked"`
	Capacity uint32 `json:"capacity"`
}

// CountersResponse answers GET /v1/counters.
type CountersResponse struct {
	// Packets lists every verdict x reason x proto, zeros included, in a
	// fixed order.
	Packets []PacketCount `json:"packets"`
	// Verdicts and Reasons are the same counts summed.
	Verdicts map[string]uint64 `json:"verdicts"`
	Reasons  map[string]uint64 `json:"reasons"`
	Sources  SourceStats       `json:"sources"`
}

// TopResponse answers GET /v1/top.
type TopResponse struct {
	By        string          `json:"by"`
	N         int             `json:"n"`
	Scanned   int             `json:"scanned"`    // table entries read
	ElapsedMs float64         `json:"elapsed_ms"` // time the walk took
	Sources   []shield.Source `json:"sources"`
}

// LimitsChange answers PUT /v1/limits.
type LimitsChange struct {
	Old shield.Limits `json:"old"`
	New shield.Limits `json:"new"`
}

// PrefixesRequest is the body of POST and DELETE on /v1/allow and /v1/deny.
type PrefixesRequest struct {
	Prefixes []string `json:"prefixes"`
}

// ListResponse answers GET, POST and DELETE on /v1/allow and /v1/deny: the
// list as it is after the request, and for changes what changed.
type ListResponse struct {
	List     string   `json:"list"`
	Prefixes []string `json:"prefixes"`
	Added    []string `json:"added,omitempty"`
	Removed  []string `json:"removed,omitempty"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}
