package testutil

import "sync"

// Pool keeps what finished tests gave back, by key, for the next test
// that wants one of the same key: loaded programs whose verification is
// the cost (under TCG a load takes seconds, a reset milliseconds). Safe
// for tests running in parallel; each value is one test's at a time.
type Pool[K comparable, V any] struct {
	mu sync.Mutex
	by map[K][]V
}

// Take returns a value given back under k, or false when there is none.
func (p *Pool[K, V]) Take(k K) (V, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	vs := p.by[k]
	if len(vs) == 0 {
		var zero V
		return zero, false
	}
	v := vs[len(vs)-1]
	p.by[k] = vs[:len(vs)-1]
	return v, true
}

// Give puts v back under k.
func (p *Pool[K, V]) Give(k K, v V) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[K][]V{}
	}
	p.by[k] = append(p.by[k], v)
}
