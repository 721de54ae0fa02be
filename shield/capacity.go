package shield

import "github.com/xdpshield/xdpshield/shield/lists"

// MaxListEntries is how many prefixes each list holds per address family
// (MAX_LIST_ENTRIES in bpf/shield.c), for callers that validate a batch
// before calling Add.
const MaxListEntries = lists.MaxEntries
