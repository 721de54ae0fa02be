// Package sock holds the socket plumbing of the l7 fast path that needs no
// BPF program: a socket's descriptor and cookie (Control), the TCP relay
// pairs on loopback of kernels that take no unix socket into a sockhash
// (TCPPairs, 5.10), waiting for a peer's end without reading (AwaitEnd)
// or reading to it without missing it (ReadToEnd), running a joined
// socket's stream parser (KickParser), the probe for unix sockets in a
// sockhash (UnixIntoSockhash), and the addresses of a listener's network
// namespace (ListenerAddrs).
//
// It owns no map and no program; package l7 decides what goes where.
package sock
