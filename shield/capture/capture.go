package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"

	"github.com/xdpshield/xdpshield/shield/counter"
)

// Snap is the most bytes of a dropped frame a capture holds (CAPTURE_SNAP
// in bpf/shield.c).
const Snap = 256

// metaSize is sizeof(struct capture_meta) in bpf/shield.c.
const metaSize = 16

// ErrBusy is Start's answer while another capture runs.
var ErrBusy = errors.New("a capture is already running")

// Frame is one dropped frame, cut to Snap bytes.
type Frame struct {
	Time   time.Time // when user space read it
	Reason counter.Reason
	Proto  counter.Proto
	Len    int    // the frame's length on the wire
	Data   []byte // its first min(Len, Snap) bytes
}

// Switch is the capture of one loaded program: its perf buffer and its
// sampling variable, and the capture running, if any.
type Switch struct {
	buf    *ebpf.Map      // captured: the perf buffer
	sample *ebpf.Variable // capture_sample: one drop in it is copied (0: off)

	mu     sync.Mutex
	cur    *Capture
	closed bool // Close was called: no new capture
}

// New is the capture of the program whose perf buffer is buf and whose
// sampling variable is sample.
func New(buf *ebpf.Map, sample *ebpf.Variable) *Switch {
	return &Switch{buf: buf, sample: sample}
}

// Capture reads the dropped frames the program copies to its perf buffer
// while it runs (one capture per Switch at a time). Stop switches the
// copying off; so do the Switch's Stop and Close.
type Capture struct {
	sw   *Switch
	rd   *perf.Reader
	once sync.Once
	// Lost counts frames the program sampled that the buffer had no room
	// for.
	Lost uint64
}

// Start switches the capture of dropped frames on: one drop in sample (1:
// every drop) is copied to the perf buffer the Capture reads.
func (w *Switch) Start(sample uint32) (*Capture, error) {
	if sample == 0 {
		return nil, fmt.Errorf("sample must be at least 1")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil {
		return nil, ErrBusy
	}
	if w.closed {
		return nil, fmt.Errorf("shield closed")
	}
	// 16 pages a CPU: 64 KiB holds ~200 frames of Snap bytes.
	rd, err := perf.NewReader(w.buf, 16*os.Getpagesize())
	if err != nil {
		return nil, fmt.Errorf("open capture buffer: %w", err)
	}
	if err := w.sample.Set(sample); err != nil {
		rd.Close()
		return nil, fmt.Errorf("switch capture on: %w", err)
	}
	c := &Capture{sw: w, rd: rd}
	w.cur = c
	return c, nil
}

// Sample is the program's sampling rate now (0: capture off).
func (w *Switch) Sample() (uint32, error) {
	var v uint32
	err := w.sample.Get(&v)
	return v, err
}

// Stop switches a running capture off (its reader sees the end).
func (w *Switch) Stop() { w.stop(false) }

// Close stops a running capture; no capture starts after.
func (w *Switch) Close() { w.stop(true) }

func (w *Switch) stop(closing bool) {
	w.mu.Lock()
	c := w.cur
	if closing {
		w.closed = true
	}
	w.mu.Unlock()
	if c != nil {
		c.Stop()
	}
}

// Next returns the next captured frame, waiting until deadline at most:
// ok is false when none came by then. An error ends the capture (the
// Capture was stopped or the Switch closed).
func (c *Capture) Next(deadline time.Time) (f Frame, ok bool, err error) {
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
		if len(raw) < metaSize {
			continue
		}
		n := int(binary.NativeEndian.Uint32(raw[12:]))
		if n > len(raw)-metaSize {
			n = len(raw) - metaSize
		}
		return Frame{
			Time:   time.Now(),
			Reason: counter.Reason(binary.NativeEndian.Uint32(raw[0:])),
			Proto:  counter.Proto(binary.NativeEndian.Uint32(raw[4:])),
			Len:    int(binary.NativeEndian.Uint32(raw[8:])),
			Data:   append([]byte(nil), raw[metaSize:metaSize+n]...),
		}, true, nil
	}
}

// Stop switches the capture off and releases the buffer. It may be
// called more than once.
func (c *Capture) Stop() error {
	var err error
	c.once.Do(func() {
		c.sw.mu.Lock()
		defer c.sw.mu.Unlock()
		err = c.sw.sample.Set(uint32(0))
		c.rd.Close()
		c.sw.cur = nil
	})
	return err
}
