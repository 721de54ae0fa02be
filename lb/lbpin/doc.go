// Package lbpin is the layout of the socket balancer's pin directory on
// bpffs: its name under the service's pin directory (Subdir, and
// StagingSubdir while a first start fills it), the maps pinned by name
// (Maps) and the cgroup links, one per program (Links); whether a
// balancer is pinned (Pinned), whether what is pinned is whole and
// attached to the expected cgroup (Check), and its removal (Remove: the
// links detached first, then the balancer's pins and nothing else).
//
// lb pins into and adopts from this layout; `shield detach` removes it
// without loading anything. It never loads a program nor writes a map, and
// removes only the names it lists.
package lbpin
