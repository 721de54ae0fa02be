package maglev

import "hash/fnv"

// Table returns a table of m slots (m prime, larger than len(names))
// holding indexes into names, by Maglev's population (Eisenbud et al.,
// NSDI 2016): each backend walks its own permutation of the slots (offset
// and skip from two hashes of its name) and backends take turns claiming
// their next free slot. Every backend gets m/len(names) slots, give or
// take one, and removing one backend reassigns mostly the slots it held.
//
// Weights (nil: all 1), as Cilium's weighted Maglev: in each round every
// backend earns its weight in credit and claims a slot only when it has
// earned the largest weight's worth, so a backend of weight w claims in
// w/max of the rounds and ends with a share of the table proportional to
// w; a weight of 0 claims none. Equal weights claim in every round: the
// unweighted table. At least one weight must be positive.
func Table(names []string, weights []uint32, m int) []int {
	n := len(names)
	weight := func(i int) uint64 {
		if weights == nil {
			return 1
		}
		return uint64(weights[i])
	}
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	next := make([]uint64, n)
	credit := make([]uint64, n)
	var maxW uint64
	for i, name := range names {
		maxW = max(maxW, weight(i))
		offset[i] = hash64(name, "maglev-offset") % uint64(m)
		skip[i] = hash64(name, "maglev-skip")%uint64(m-1) + 1
	}
	owner := make([]int, m)
	for i := range owner {
		owner[i] = -1
	}
	if maxW == 0 {
		return owner
	}
	filled := 0
	for filled < m {
		for i := 0; i < n && filled < m; i++ {
			credit[i] += weight(i)
			if credit[i] < maxW {
				continue
			}
			credit[i] -= maxW
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
	return owner
}

func hash64(s, seed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed))
	h.Write([]byte(s))
	return h.Sum64()
}
