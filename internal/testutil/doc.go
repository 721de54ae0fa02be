// Package testutil holds helpers only the repository's tests use: privilege
// and kernel-feature checks that skip with a reason, or fail when
// SHIELD_REQUIRE_PRIV=1 says the environment must provide the feature;
// whether the CPU is emulated (TCG), for timing bounds; and filling a
// sources table for the scale tests and benchmarks.
//
// It touches nothing outside the test's own process and namespaces.
package testutil
