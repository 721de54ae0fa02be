// Package nft renders the nftables twin of a shield configuration: the same
// allow and deny lists and the same per-source token bucket, written as an
// nftables ruleset on the netdev ingress hook of the protected interface,
// and applies it with the nft binary (Debian's nftables).
//
// The twin is the baseline every study compares the XDP shield against, and
// a real fallback for a machine without XDP. Where nftables cannot say what
// the program does, Ruleset's comments say so (see Render).
//
// It owns only the nftables table it names (netdev xdpshield, or the name
// given): Apply replaces that table atomically and Delete removes it; it
// never touches another table, and it runs nft in the caller's network
// namespace.
package nft
