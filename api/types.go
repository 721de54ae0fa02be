package api

import (
	"time"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
)

// DefaultListen is where the service listens unless told otherwise.
const DefaultListen = "127.0.0.1:9470"

// PacketCount is one counter: packets given verdict for reason and proto,
// summed over CPUs.
type PacketCount struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Proto   string `json:"proto"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"` // the frames' whole length, from the Ethernet header
}

// SourceStats says how full the per-source table is.
type SourceStats struct {
	Tracked  int    `json:"tracked"`
	Capacity uint32 `json:"capacity"`
	// Evictions counts insertions that replaced an idle source rather
	// than taking an empty way (shield.Shield.Evictions).
	Evictions uint64 `json:"evictions"`
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
	Sources   []source.Source `json:"sources"`
}

// LimitsChange answers PUT /v1/limits.
type LimitsChange struct {
	Old config.Limits `json:"old"`
	New config.Limits `json:"new"`
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
	// Hits (GET only): per prefix, the packets whose longest listed match
	// it was since it was put on the list.
	Hits map[string]uint64 `json:"hits,omitempty"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Info describes the running service; GET /v1/info answers it. Every field
// is optional (a Server run in-process by tests leaves them empty).
type Info struct {
	Iface     string    `json:"iface,omitempty"`
	Mode      string    `json:"mode,omitempty"`    // native or generic
	PinDir    string    `json:"pin_dir,omitempty"` // bpffs directory of the link and maps
	LinkID    uint32    `json:"link_id,omitempty"`
	ProgramID uint32    `json:"program_id,omitempty"`
	Adopted   bool      `json:"adopted"` // the pinned link was adopted at start
	Started   time.Time `json:"started"`
	Version   string    `json:"version,omitempty"`
	// UptimeSeconds is filled in by the server when it answers.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Healthy and Problem are filled in by the server when it answers:
	// whether the program protects the interface now (Options.Health).
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
}

// HealthResponse answers GET /v1/health: 200 when the shield protects its
// interface, 503 with the reason when it cannot.
type HealthResponse struct {
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
}
