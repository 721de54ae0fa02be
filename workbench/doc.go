// Package workbench serves the live page of `shield serve` (off by
// default; [workbench] in the configuration): the shield's counters as
// packets per second by verdict and reason, the top talkers, the table's
// occupancy, the lists' sizes and the limits, pushed to the browser as
// Server-Sent Events once a second, and, for a signed-in visitor, the
// storm scenario started as the lab's own binary (`shieldlab storm`) in
// throwaway namespaces, its phases and the legitimate client's latency
// shown as they happen.
//
// It owns the page (embedded with go:embed, loading nothing from
// elsewhere), the sessions (an HttpOnly, SameSite=Strict cookie and a
// CSRF token each change carries) and the storm's subprocess. It must not
// link a lab package (the storm is another binary, TestProductLinksNoLab)
// and never changes the shield: it only reads it. Everything it serves
// lives under Prefix; the API's routes are the api package's.
package workbench
