package shield

import "fmt"

// Evictions returns how many insertions into the sources table replaced a
// source (one idle for its buckets' fill time) rather than taking an empty
// way, summed over CPUs, since the map was created: the count survives
// restarts that adopt the pins. Sources the table holds at once are
// Sources' business (a walk); evictions rising while the table is near
// full says it is too small for the sources it sees.
func (s *Shield) Evictions() (uint64, error) {
	var per []uint64
	if err := s.objs.Evictions.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read evictions: %w", err)
	}
	var n uint64
	for _, x := range per {
		n += x
	}
	return n, nil
}
