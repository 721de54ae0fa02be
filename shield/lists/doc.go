// Package lists holds the shield's address lists as values: List (allow,
// deny), ParsePrefixes, ListChange, and the pure function from the two
// lists and the own addresses to what the verdict tries must hold (Want:
// allow wins over deny at any prefix length, own addresses valued own)
// with the region bitmaps the program's configuration carries (Regions).
//
// It must not touch a map: package shield writes what Want and Regions
// return into the tries and the configuration; it imports only package
// bpf's generated constants.
package lists
