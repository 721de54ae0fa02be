// Package serve is `shield serve`'s command: the configuration file (TOML,
// docs/shield.example.toml) read over the defaults and validated whole,
// every problem placed on its line, with the flags laid over it; -check;
// the capabilities serve needs, named before the kernel refuses; the
// service (package service) run until the signal, telling systemd it is
// ready and alive and applying the file again on SIGHUP. It also holds
// the two commands bound to serve's configuration and pins: nft, the
// nftables twin of a configuration, and detach, which removes what serve
// left attached and pinned.
//
// It writes the shield's maps only through package service, and pins
// only through pin.Detach; it does not talk to a running service
// (internal/cli's commands do). It must not import test or lab code
// (cmd/shield's TestProductLinksNoLab).
package serve
