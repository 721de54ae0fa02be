package source

import (
	"cmp"
	"container/heap"
	"slices"
)

// Ranking keeps the best n sources offered under an order, in a min-heap
// of n entries whose root is the weakest of them, so memory is O(n)
// however many are offered (Top walks the whole table through one).
type Ranking struct {
	n int
	h topHeap
}

// NewRanking ranks the best n sources by by.
func NewRanking(n int, by TopOrder) *Ranking { return &Ranking{n: n, h: topHeap{by: by}} }

// Admits says whether a source of score (its count under the order) could
// enter the ranking: a cheap reject before building the Source, as most
// entries of a walk lose.
func (r *Ranking) Admits(score uint64) bool {
	return len(r.h.s) < r.n || score >= r.h.score(r.h.s[0])
}

// Offer ranks src: it takes the place of the weakest when it beats it.
func (r *Ranking) Offer(src Source) {
	h := &r.h
	if len(h.s) < r.n {
		heap.Push(h, src)
		return
	}
	if h.less(h.s[0], src) {
		h.s[0] = src
		heap.Fix(h, 0)
	}
}

// Sorted returns the sources ranked, the best first; the Ranking is used
// up.
func (r *Ranking) Sorted() []Source {
	out := r.h.s
	slices.SortFunc(out, func(a, b Source) int { return -r.h.cmp(a, b) })
	return out
}

// topHeap is a min-heap: its root is the weakest of the best n so far.
type topHeap struct {
	by TopOrder
	s  []Source
}

func (h *topHeap) score(s Source) uint64 {
	if h.by == ByPassed {
		return s.Passed
	}
	return s.Dropped
}

// cmp orders by score, then by the other count, then by address descending,
// so that sorting by -cmp lists the lower address first among equals.
func (h *topHeap) cmp(a, b Source) int {
	if c := cmp.Compare(h.score(a), h.score(b)); c != 0 {
		return c
	}
	other := func(s Source) uint64 { return s.Passed + s.Dropped }
	if c := cmp.Compare(other(a), other(b)); c != 0 {
		return c
	}
	return b.Addr.Compare(a.Addr)
}

func (h *topHeap) less(a, b Source) bool { return h.cmp(a, b) < 0 }
func (h *topHeap) Len() int              { return len(h.s) }
func (h *topHeap) Less(i, j int) bool    { return h.less(h.s[i], h.s[j]) }
func (h *topHeap) Swap(i, j int)         { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *topHeap) Push(x any)            { h.s = append(h.s, x.(Source)) }
func (h *topHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
