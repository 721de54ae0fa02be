// Package config holds the shield's settings as values: Limits (the one
// type of the data path's settings, from the configuration file's TOML or
// the API's JSON, with Validate the one check), Destination, Aggregate,
// ClassLimits, the ephemeral PortRange and the program's Clock, and the
// pure translation of Limits to and from the program's configuration
// entry (Limits.Config, LimitsOf) and its aggregate and destination keys.
// ErrInvalid marks an error the input caused.
//
// It must not touch a map or load anything: package shield writes what
// Config returns (and CheckLimits, which measures the tick, stays there);
// it imports only package bpf's generated types and shield/counter.
package config
