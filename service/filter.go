package service

import (
	"context"
	"time"
)

const (
	// filterCheckEvery is how often the service reads how full the
	// presence filter is (a popcount of 2 MiB).
	filterCheckEvery = 5 * time.Second
	// filterMaxFill: with more of its bits set, the presence filter sends
	// that share of forged strangers to the big table: it is rebuilt
	// from the table (shield.RefreshFilter). A full default table of
	// 1,048,576 sources sets about 6%.
	filterMaxFill = 0.25

	keyFill    = "fill"
	keyScanned = "scanned"
	keyTook    = "took"
)

// keepFilter rebuilds the presence filter whenever evicted sources have
// left too many of its bits set, until Close.
func (s *Service) keepFilter() {
	s.filterDone = make(chan struct{})
	sh := s.att.Shield
	go func() {
		defer close(s.filterDone)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		tick := time.NewTicker(filterCheckEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			st, err := sh.Filter()
			if err != nil {
				s.log.Warn("read the presence filter", keyErr, err)
				continue
			}
			if st.Fill < filterMaxFill {
				continue
			}
			start := time.Now()
			got, err := sh.RefreshFilter(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("refresh the presence filter", keyErr, err)
				}
				continue
			}
			s.log.Info("presence filter rebuilt from the table", keyOld, st.Fill, keyFill, got.Fill,
				keyScanned, got.Scanned, keyTook, time.Since(start).Round(time.Millisecond))
		}
	}()
}
