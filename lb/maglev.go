package lb

import (
	"hash/fnv"
)

// maglevTable fills a table of m slots (m prime) with the ids of backends,
// by Maglev's population (see MaglevTable).
func maglevTable(backends []backend, m int) []uint32 {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.addr.String()
	}
	out := make([]uint32, m)
	for c, i := range MaglevTable(names, nil, m) {
		out[c] = backends[i].id
	}
	return out
}

// MaglevTable returns a table of m slots (m prime, larger than len(names)) holding
// indexes into names, by Maglev's population (Eisenbud et al., NSDI 2016):
// each backend walks its own permutation of the slots (offset and skip from
// two hashes of its name) and backends take turns claiming their next free
// slot. Every backend gets m/len(names) slots, give or take one, and
// removing one backend reassigns mostly the slots it held. With weights
// (nil: all 1), backend i claims weights[i] slots per turn, so its share is
// proportional to its weight; a weight of 0 claims none. At least one
// weight must be positive.
func MaglevTable(names []string, weights []uint32, m int) []int {
	n := len(names)
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	next := make([]uint64, n)
	for i, name := range names {
		offset[i] = hash64(name, "maglev-offset") % uint64(m)
		skip[i] = hash64(name, "maglev-skip")%uint64(m-1) + 1
	}
	weight := func(i int) uint32 {
		if weights == nil {
			return 1
		}
		return weights[i]
	}
	owner := make([]int, m)
	for i := range owner {
		owner[i] = -1
	}
	filled := 0
	for filled < m {
		for i := 0; i < n && filled < m; i++ {
			for w := weight(i); w > 0 && filled < m; w-- {
				c := (offset[i] + next[i]*skip[i]) % uint64(m)
				for owner[c] >= 0 {
					next[i]++
					c = (offset[i] + next[i]*skip[i]) % uint64(m)
				}
				owner[c] = i
				next[i]++
				filled++
			}
		}
	}
	return owner
}

func hash64(s, seed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed))
	h.Write([]byte(s))
	return h.Sum64()
}
