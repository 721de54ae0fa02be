package lb

import (
	"hash/fnv"
)

// maglevTable fills a table of m slots (m prime) with the ids of backends,
// by Maglev's population (Eisenbud et al., NSDI 2016): each backend walks
// its own permutation of the slots (offset and skip from two hashes of its
// address) and backends take turns claiming their next free slot. Every
// backend gets m/len(backends) slots, give or take one, and removing one
// backend reassigns mostly the slots it held.
func maglevTable(backends []backend, m int) []uint32 {
	n := len(backends)
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	next := make([]uint64, n)
	for i, b := range backends {
		name := b.addr.String()
		offset[i] = hash64(name, "maglev-offset") % uint64(m)
		skip[i] = hash64(name, "maglev-skip")%uint64(m-1) + 1
	}
	owner := make([]int, m)
	for i := range owner {
		owner[i] = -1
	}
	filled := 0
	for filled < m {
		for i := 0; i < n && filled < m; i++ {
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
	out := make([]uint32, m)
	for c, i := range owner {
		out[c] = backends[i].id
	}
	return out
}

func hash64(s, seed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed))
	h.Write([]byte(s))
	return h.Sum64()
}
