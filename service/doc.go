// Package service is the shield service's one wiring: it binds the API
// listener, attaches the shield to one interface through pin.Attach
// (pins, per-interface lock, adoption of a pinned link), puts the configured
// allow and deny prefixes on the lists, and serves the authenticated HTTP
// API and /metrics of package api until it is stopped. When configured it
// also runs the socket balancer (lb) and the L7 proxy with its fast path
// (l7, [l7]): the proxy's address is bound, and its section validated,
// before anything is attached; both stop with the service.
//
// `shield serve` (cmd/shield) and the storms (e2e) both run it, so a storm
// exercises what operators run. Start works in the caller's network
// namespace: the interface, the listener and the pins it finds there are
// the service's. It validates its Config, binds its admin socket, attaches,
// and then binds the API's TCP listener, retrying while the port is taken
// (an occupied port never leaves the interface unprotected). It never detaches the program on its own: when it
// stops, the pinned link keeps the interface protected (shield detach, or
// Service.Detach, removes it). It writes the maps only through package
// shield and never sits on the packet path.
package service
