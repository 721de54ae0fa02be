// Package ownaddr finds the machine's own addresses and follows them: List
// reads the addresses of every interface of the calling thread's network
// namespace over netlink, and Watch keeps a Setter (the shield's SetOwn)
// holding them as netlink reports addresses added and removed, reporting
// each change it made (Change).
//
// It must not write the program's maps: package shield's SetOwn does,
// with what Watch passes it; it only reads addresses and subscribes to
// their updates, in the namespace it is called from.
package ownaddr
