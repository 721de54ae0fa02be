package shield

import "github.com/xdpshield/xdpshield/shield/capture"

// StartCapture switches the capture of dropped frames on: one drop in
// sample (1: every drop) is copied to the perf buffer the Capture reads
// (one capture at a time: capture.ErrBusy; Close stops it).
func (s *Shield) StartCapture(sample uint32) (*capture.Capture, error) { return s.cap.Start(sample) }

// CaptureSample is the program's sampling rate now (0: capture off).
func (s *Shield) CaptureSample() (uint32, error) { return s.cap.Sample() }

// StopCapture switches a running capture off (its reader sees the end);
// the service calls it as it stops, so that a capture in flight neither
// delays the stop nor outlives it.
func (s *Shield) StopCapture() { s.cap.Stop() }
