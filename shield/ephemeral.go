package shield

import "github.com/xdpshield/xdpshield/shield/config"

// Ephemeral is the ephemeral port range in force.
func (s *Shield) Ephemeral() config.PortRange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eph
}

// SetEphemeral makes r the edge's ephemeral port range, which return
// traffic is judged by, in one configuration swap.
func (s *Shield) SetEphemeral(r config.PortRange) error {
	if err := r.Validate(); err != nil {
		return config.Invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.eph
	s.eph = r
	if err := s.publish(s.limits); err != nil {
		s.eph = old
		return err
	}
	return nil
}
