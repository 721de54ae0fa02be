package xdplb

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// FlowHash is the Go twin of xdplb.c's flow_hash: murmur3's 32-bit mixing
// over struct flow's ten words (addresses and ports in network order,
// words loaded little-endian, as the program on x86 and arm64 loads them).
// The slot of a flow in its VIP's table is FlowHash % RingSize.
func FlowHash(src, dst netip.Addr, sport, dport uint16, proto uint8) uint32 {
	var f [40]byte
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		copy(f[0:], a[:])
		copy(f[16:], b[:])
	} else {
		a, b := src.As16(), dst.As16()
		copy(f[0:], a[:])
		copy(f[16:], b[:])
		f[37] = 1
	}
	binary.BigEndian.PutUint16(f[32:], sport)
	binary.BigEndian.PutUint16(f[34:], dport)
	f[36] = proto
	h := uint32(0x5eed)
	for i := 0; i < 10; i++ {
		k := binary.LittleEndian.Uint32(f[4*i:])
		k *= 0xcc9e2d51
		k = bits.RotateLeft32(k, 15)
		k *= 0x1b873593
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	h ^= 40
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
