package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/xdpshield/xdpshield/shield/capture"
)

// Capture bounds (GET /v1/capture).
const (
	DefaultCaptureCount   = 100
	MaxCaptureCount       = 100000
	DefaultCaptureSeconds = 10
	// MaxCaptureSeconds stays under the service's write timeout.
	MaxCaptureSeconds = 30
	// capturePoll is how often a waiting capture looks at the client.
	capturePoll = 100 * time.Millisecond
)

// pcap's classic file format (libpcap's savefile.c, pcap-savefile(5)):
// microsecond timestamps, LINKTYPE_ETHERNET.
const (
	pcapMagic        = 0xa1b2c3d4
	pcapLinkEthernet = 1
)

// pcapWriter writes a pcap file: a 24-byte global header, then a 16-byte
// record header before each frame, little-endian. gopacket's pcapgo does
// the same but the product links no gopacket.
type pcapWriter struct {
	w    io.Writer
	snap uint32
}

func newPcapWriter(w io.Writer, snap uint32) (*pcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	// thiszone and sigfigs: 0
	binary.LittleEndian.PutUint32(h[16:], snap)
	binary.LittleEndian.PutUint32(h[20:], pcapLinkEthernet)
	_, err := w.Write(h[:])
	return &pcapWriter{w: w, snap: snap}, err
}

// write records data, the first bytes of a frame of length orig.
func (p *pcapWriter) write(ts time.Time, data []byte, orig int) error {
	if uint32(len(data)) > p.snap {
		data = data[:p.snap]
	}
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(ts.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], uint32(max(orig, len(data))))
	if _, err := p.w.Write(h[:]); err != nil {
		return err
	}
	_, err := p.w.Write(data)
	return err
}

// captureParam reads a positive integer query parameter.
func captureParam(r *http.Request, name string, def, limit int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > limit {
		return 0, badf("%s must be an integer from 1 to %d, got %q", name, limit, sanitize(v))
	}
	return n, nil
}

// getCapture streams a pcap of dropped frames: sampling is switched on
// for the request only, and off when count frames were sent, seconds
// passed or the client went away, whichever comes first.
func (s *Server) getCapture(w http.ResponseWriter, r *http.Request) {
	count, err := captureParam(r, "count", DefaultCaptureCount, MaxCaptureCount)
	if err != nil {
		s.fail(w, err)
		return
	}
	seconds, err := captureParam(r, "seconds", DefaultCaptureSeconds, MaxCaptureSeconds)
	if err != nil {
		s.fail(w, err)
		return
	}
	sample, err := captureParam(r, "sample", 1, 1<<30)
	if err != nil {
		s.fail(w, err)
		return
	}
	c, err := s.sh.StartCapture(uint32(sample))
	if errors.Is(err, capture.ErrBusy) {
		writeError(w, http.StatusConflict, err)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.Stop()
	s.log.Info("capture started", "operator", who(r), "remote", r.RemoteAddr,
		"count", count, "seconds", seconds, "sample", sample)

	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.Header().Set("Content-Disposition", `attachment; filename="shield-drops.pcap"`)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	pw, err := newPcapWriter(w, capture.Snap)
	if err != nil {
		return
	}
	rc.Flush()
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	sent := 0
	why := "count"
	for sent < count {
		if r.Context().Err() != nil {
			why = "client gone"
			break
		}
		now := time.Now()
		if !now.Before(end) {
			why = "time"
			break
		}
		wait := now.Add(capturePoll)
		if end.Before(wait) {
			wait = end
		}
		f, ok, err := c.Next(wait)
		if err != nil {
			why = fmt.Sprintf("ended: %v", err)
			break
		}
		if !ok {
			continue
		}
		if err := pw.write(f.Time, f.Data, f.Len); err != nil {
			why = "client gone"
			break
		}
		rc.Flush()
		sent++
	}
	c.Stop()
	s.log.Info("capture stopped", "operator", who(r), "frames", sent, "lost", c.Lost, "why", why)
}
