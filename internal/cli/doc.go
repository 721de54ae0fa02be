// Package cli is the command line of the product binary, shield, but for
// serve: the conventions every subcommand follows (Env, Command, usage
// errors and exit statuses, -h on stdout, -json) and the commands that talk
// to a running service through its API (status, top, allow, deny, limits,
// lb, l7, xdplb, capture, health), with the two that need no service
// (probe, version).
//
// The API commands reach a local service only through its admin socket
// (checked to be root's or this user's before anything is sent), and
// refuse plain http:// beyond loopback; the token is read from a file only
// its owner can read.
//
// It owns no program and no map: the API commands change the service only
// through package api's client, and probe attaches only the tc probe of
// package probe, removed when it ends. `shield serve` and the commands
// bound to its configuration and pins (nft, detach) are internal/serve's;
// cmd/shield dispatches to both. It must not import test or lab code
// (cmd/shield's TestProductLinksNoLab).
package cli
