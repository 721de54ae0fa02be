// Package sockdestroy ends the sockets the socket balancer (lb) sent to a
// backend that has been removed: socket iterators (iter/tcp, iter/udp of
// bpf/lb_destroy.c) read each socket's balancer state (its sk_storage) and
// call bpf_sock_destroy (6.5+) on those whose state names a removed
// backend; TCP sockets are aborted (ECONNABORTED), UDP ones fail their
// next call.
//
// It owns the iterator programs and their two maps (the targets and the
// count); it reads the balancer's socket state map, never writes it, and
// touches no socket the state does not name. Load fails on a kernel that
// cannot do it; lb then leaves such sockets open and counts them.
package sockdestroy
