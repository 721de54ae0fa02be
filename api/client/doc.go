// Package client is the Go client of the shield service's HTTP API
// (package api): one method per route, the answers decoded into api's
// types, an answer other than 2xx an *Error. `shield`'s commands (status,
// top, limits, allow, deny, lb, l7, xdplb, capture) and the storms reach
// the service through it.
//
// It only sends requests: it holds no state of the service, serves
// nothing and never touches a program or map. A 2xx answer that does not
// describe the change asked of a list is an error, not a success.
package client
