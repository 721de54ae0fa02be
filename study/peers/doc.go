// Package peers writes the project's [l7] policy (policy.Config) as the
// configuration of the proxies users run today, HAProxy 2.6 and nginx 1.22,
// so the study can set them beside the fast path and the Go proxy with the
// same policy, generated from one source so the three cannot drift.
//
// It is lab code: only the study and its tests use it, and cmd/shield must
// not link it (nothing here is product; the product enforces the policy
// itself). It writes text only; running the proxies is the caller's job,
// inside the namespaces it made.
//
// What each peer cannot say as the project does is refused (an error naming
// the field) or documented on the generator: see HAProxy and Nginx.
package peers
