package service

import (
	"fmt"

	"github.com/xdpshield/xdpshield/l7"
)

// listenL7 validates the [l7] section and binds the proxy's address, before
// anything is attached: a section with an error, or an address that cannot
// be served, leaves nothing behind.
func (s *Service) listenL7() error {
	p, err := l7.Listen(s.cfg.L7, nil)
	if err != nil {
		return fmt.Errorf("l7 (nothing was attached): %w", err)
	}
	s.l7 = p
	return nil
}

// startL7 serves the proxy, with the kernel's fast path when the kernel
// runs it (the proxy alone otherwise: logged, and GET /v1/l7 says why). It
// stops with the service.
func (s *Service) startL7() {
	if s.l7 != nil {
		s.l7.Start(s.log)
	}
}

// L7 is the L7 proxy, nil when none is configured.
func (s *Service) L7() *l7.Server { return s.l7 }
