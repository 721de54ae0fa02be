// Package policy owns the L7 policy in pure Go: the [l7] section of `shield
// serve`'s configuration (Section, Config: routes by Host and path prefix to
// backend pools with a consistent hash of a chosen header, RBAC allow/deny,
// one header mutation), its validation whole (Config.Validate,
// Section.Validate, Loops), the one meaning of a request path the policy
// judges (NormalPath), and the compiled Policy whose Decide both enforcers
// follow: the Go proxy calls it, and the kernel's data plane is written from
// its routes, rules and rings (package l7).
//
// It touches no socket, map or program and needs no privilege: everything
// in it is tested as an unprivileged user.
package policy
