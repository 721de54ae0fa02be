// Package health is the socket balancer's active health checking: every
// service with a HealthCheck (package lbconf) has each backend that is not
// draining probed once an Interval, at most 16 at once, each probe bounded
// by the check's Timeout: a TCP connect, or a UDP request that must be
// answered. Fails failures in a row quarantine a backend, Passes successes
// in a row restore it; Probes counts them per backend.
//
// It owns the probe counts and the schedule. It reads the services and
// changes a backend's quarantine only through the functions its balancer
// gives New (lb writes the maps, validated, as one change), and it sends
// nothing but its probes, from the caller's network namespace.
package health
