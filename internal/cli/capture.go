package cli

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"

	"github.com/xdpshield/xdpshield/api"
)

func runCapture(ctx context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	file := fs.String("w", "", "the pcap file to write (- for standard output)")
	count := fs.Int("count", api.DefaultCaptureCount, fmt.Sprintf("stop after this many frames (1-%d)", api.MaxCaptureCount))
	seconds := fs.Int("seconds", api.DefaultCaptureSeconds, fmt.Sprintf("stop after this many seconds (1-%d)", api.MaxCaptureSeconds))
	sample := fs.Int("sample", 1, "capture one drop in this many")
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("capture: unexpected arguments %q", fs.Args())
	}
	if *file == "" {
		return Usagef("capture: -w FILE is required")
	}
	cl, err := cf.client(true)
	if err != nil {
		return err
	}
	data, err := cl.Capture(ctx, *count, *seconds, *sample)
	if err != nil {
		return err
	}
	if *file == "-" {
		_, err = e.Stdout.Write(data)
		return err
	}
	if err := os.WriteFile(*file, data, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(e.Stderr, "%d dropped frames written to %s\n", pcapRecords(data), *file)
	return nil
}

// pcapRecords counts the records of a classic little-endian pcap.
func pcapRecords(b []byte) int {
	n := 0
	for off := 24; off+16 <= len(b); n++ {
		off += 16 + int(binary.LittleEndian.Uint32(b[off+8:]))
	}
	return n
}
