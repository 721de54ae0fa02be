package shield

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf/perf"

	"github.com/xdpshield/xdpshield/shield/counter"
)

// CaptureSnap is the most bytes of a dropped frame a capture holds
// (CAPTURE_SNAP in bpf/shield.c).
const CaptureSnap = 256

// captureMetaSize is sizeof(struct capture_meta) in bpf/shield.c.
const captureMetaSize = 16

// ErrCaptureBusy is StartCapture's answer while another capture runs.
var ErrCaptureBusy = errors.New("a capture is already running")

// CapturedFrame is one dropped frame, cut to CaptureSnap bytes.
type CapturedFrame struct {
	Time   time.Time // when user space read it
	Reason counter.Reason
	Proto  counter.Proto
	Len    int    // the frame's length on the wire
	Data   []byte // its first min(Len, CaptureSnap) bytes
}

// Capture reads the dropped frames the program copies to its perf buffer
// while it runs (one capture per Shield at a time). Stop switches the
// copying off; so does the Shield's Close.
type Capture struct {
	s    *Shield
	rd   *perf.Reader
	once sync.Once
	// Lost counts frames the program sampled that the buffer had no room
	// for.
	Lost uint64
}

// captureState is the running capture, if any, under mu.
type captureState struct {
	mu     sync.Mutex
	cur    *Capture
	closed bool // the Shield closed: no new capture
}

// StartCapture switches the capture of dropped frames on: one drop in
// sample (1: every drop) is copied to the perf buffer the Capture reads.
func (s *Shield) StartCapture(sample uint32) (*Capture, error) {
	if sample == 0 {
		return nil, fmt.Errorf("sample must be at least 1")
	}
	s.cap.mu.Lock()
	defer s.cap.mu.Unlock()
	if s.cap.cur != nil {
		return nil, ErrCaptureBusy
	}
	if s.cap.closed {
		return nil, fmt.Errorf("shield closed")
	}
	// 16 pages a CPU: 64 KiB holds ~200 frames of CaptureSnap bytes.
	rd, err := perf.NewReader(s.objs.Captured, 16*os.Getpagesize())
	if err != nil {
		return nil, fmt.Errorf("open capture buffer: %w", err)
	}
	if err := s.objs.CaptureSample.Set(sample); err != nil {
		rd.Close()
		return nil, fmt.Errorf("switch capture on: %w", err)
	}
	c := &Capture{s: s, rd: rd}
	s.cap.cur = c
	return c, nil
}

// CaptureSample is the program's sampling rate now (0: capture off).
func (s *Shield) CaptureSample() (uint32, error) {
	var v uint32
	err := s.objs.CaptureSample.Get(&v)
	return v, err
}

// Next returns the next captured frame, waiting until deadline at most:
// ok is false when none came by then. An error ends the capture (the
// Capture was stopped or the Shield closed).
func (c *Capture) Next(deadline time.Time) (f CapturedFrame, ok bool, err error) {
	for {
		c.rd.SetDeadline(deadline)
		rec, err := c.rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return f, false, nil
		}
		if err != nil {
			return f, false, err
		}
		if rec.LostSamples > 0 {
			c.Lost += rec.LostSamples
			continue
		}
		raw := rec.RawSample
		if len(raw) < captureMetaSize {
			continue
		}
		n := int(binary.NativeEndian.Uint32(raw[12:]))
		if n > len(raw)-captureMetaSize {
			n = len(raw) - captureMetaSize
		}
		return CapturedFrame{
			Time:   time.Now(),
			Reason: counter.Reason(binary.NativeEndian.Uint32(raw[0:])),
			Proto:  counter.Proto(binary.NativeEndian.Uint32(raw[4:])),
			Len:    int(binary.NativeEndian.Uint32(raw[8:])),
			Data:   append([]byte(nil), raw[captureMetaSize:captureMetaSize+n]...),
		}, true, nil
	}
}

// Stop switches the capture off and releases the buffer. It may be
// called more than once.
func (c *Capture) Stop() error {
	var err error
	c.once.Do(func() {
		c.s.cap.mu.Lock()
		defer c.s.cap.mu.Unlock()
		err = c.s.objs.CaptureSample.Set(uint32(0))
		c.rd.Close()
		c.s.cap.cur = nil
	})
	return err
}

// StopCapture switches a running capture off (its reader sees the end);
// the service calls it as it stops, so that a capture in flight neither
// delays the stop nor outlives it.
func (s *Shield) StopCapture() { s.stopCapture(false) }

// stopCapture stops a running capture; closing, no capture starts after.
func (s *Shield) stopCapture(closing bool) {
	s.cap.mu.Lock()
	c := s.cap.cur
	if closing {
		s.cap.closed = true
	}
	s.cap.mu.Unlock()
	if c != nil {
		c.Stop()
	}
}
