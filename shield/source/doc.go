// Package source holds the shield's sources table as values and pure
// functions: Source (one tracked source as the API and Top report it),
// the key and prefix an address is tracked under (Key, Prefix), the
// table's layout (Ways, SetSize, the Used mark) and keyed hash (HashKeys,
// HashOf, SetOf, SetBits, mirroring bpf/shield.c), the way lookup, walk
// and insertion within one set (FindWay, VisitSet, HeldBy, Place), the
// bucket refill judgement (LimitedAt), and Top's order (TopOrder) and
// bounded ranking (Ranking: the best n of the sources offered).
//
// It must not map, read or write the table itself: package shield maps
// it and calls these on the sets; it imports only package bpf's generated
// types and shield/config.
package source
