// Package api is the shield service's HTTP JSON contract, versioned under
// /v1, and its Prometheus /metrics endpoint; the Go client of both is
// api/client.
//
// A Server wraps a loaded *shield.Shield and is an http.Handler: the
// service (service, behind `shield serve` and the storms) and tests
// serve it. It changes the program's maps only through package shield,
// validates every change whole before writing anything (strict JSON: no
// duplicate, case-folded or missing keys), and requires the operator token
// for changes. It neither loads nor attaches the program and never sits on the
// packet path.
package api
