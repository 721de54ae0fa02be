// Package pin attaches the shield to an interface and takes it off again:
// it owns the pin directory of each interface (one per network namespace,
// named by the namespace's inode and cookie, so a service never adopts
// another namespace's pins), its exclusive lock, and the pinned bpf_link.
// Attach loads the program through shield.Load with its maps pinned in
// that directory, adopting a pinned link and replacing its program
// atomically; Detach removes the link and the names the shield pins
// (shield.PinNames), and the companions' subdirectories (the balancer's)
// through their own Remove.
//
// It never writes the program's maps (package shield does) and removes
// nothing it did not pin; the only change outside a pin directory is a
// bpffs mounted on /sys/fs/bpf when none is (pinfs.EnsureBPFFS).
package pin
