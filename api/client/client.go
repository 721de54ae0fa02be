package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/l7/policy"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/xdplb"
)

// Client talks to a Server.
type Client struct {
	// Base is the server's URL, e.g. "http://127.0.0.1:9470".
	Base string
	// Token is sent as a bearer token (changes need it).
	Token string
	// Operator names who makes changes in the service's logs.
	Operator string
	// HTTP is the client used (default http.DefaultClient).
	HTTP *http.Client
}

// Error is an answer other than 2xx.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// do sends a request with body (JSON, when not nil) and decodes a 2xx
// answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	data, err := c.request(ctx, method, path, body)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// request sends a request and returns a 2xx answer's body; other answers
// are an *Error.
func (c *Client) request(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	base := strings.TrimSuffix(c.Base, "/")
	if base == "" {
		base = "http://" + api.DefaultListen
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Operator != "" {
		req.Header.Set(api.OperatorHeader, c.Operator)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return nil, &Error{Status: resp.StatusCode, Message: e.Error}
	}
	return data, nil
}

// Info reads GET /v1/info.
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	var r api.Info
	return r, c.do(ctx, http.MethodGet, "/v1/info", nil, &r)
}

// Health reads GET /v1/health. An unhealthy service answers 503: that is
// a HealthResponse with Healthy false, not an error.
func (c *Client) Health(ctx context.Context) (api.HealthResponse, error) {
	var r api.HealthResponse
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &r)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusServiceUnavailable {
		// The body is a HealthResponse, which the error kept as text.
		if json.Unmarshal([]byte(e.Message), &r) != nil || r.Problem == "" {
			r.Problem = e.Message
		}
		r.Healthy = false
		return r, nil
	}
	return r, err
}

// Counters reads GET /v1/counters.
func (c *Client) Counters(ctx context.Context) (api.CountersResponse, error) {
	var r api.CountersResponse
	return r, c.do(ctx, http.MethodGet, "/v1/counters", nil, &r)
}

// Top reads GET /v1/top.
func (c *Client) Top(ctx context.Context, n int, by source.TopOrder) (api.TopResponse, error) {
	var r api.TopResponse
	q := url.Values{"n": {strconv.Itoa(n)}, "by": {by.String()}}
	return r, c.do(ctx, http.MethodGet, "/v1/top?"+q.Encode(), nil, &r)
}

// Limits reads GET /v1/limits.
func (c *Client) Limits(ctx context.Context) (config.Limits, error) {
	var l config.Limits
	return l, c.do(ctx, http.MethodGet, "/v1/limits", nil, &l)
}

// SetLimits replaces the limits (PUT /v1/limits).
func (c *Client) SetLimits(ctx context.Context, l config.Limits) (api.LimitsChange, error) {
	var r api.LimitsChange
	return r, c.do(ctx, http.MethodPut, "/v1/limits", l, &r)
}

// List reads GET /v1/allow or /v1/deny.
func (c *Client) List(ctx context.Context, l lists.List) (api.ListResponse, error) {
	var r api.ListResponse
	return r, c.do(ctx, http.MethodGet, "/v1/"+l.String(), nil, &r)
}

// Add puts prefixes on list l (POST), all or none.
func (c *Client) Add(ctx context.Context, l lists.List, prefixes []string) (api.ListResponse, error) {
	var r api.ListResponse
	if err := c.do(ctx, http.MethodPost, "/v1/"+l.String(), api.PrefixesRequest{Prefixes: prefixes}, &r); err != nil {
		return r, err
	}
	return r, checkList(r, l, http.MethodPost)
}

// Remove takes prefixes off list l (DELETE), all or none.
func (c *Client) Remove(ctx context.Context, l lists.List, prefixes []string) (api.ListResponse, error) {
	var r api.ListResponse
	if err := c.do(ctx, http.MethodDelete, "/v1/"+l.String(), api.PrefixesRequest{Prefixes: prefixes}, &r); err != nil {
		return r, err
	}
	return r, checkList(r, l, http.MethodDelete)
}

// checkList refuses an answer that does not describe the change asked of
// list l: a 2xx from something other than the service (issue 23, finding
// 4, where "added 0 new prefixes" was printed for a squatter's empty
// answer) is no success.
func checkList(r api.ListResponse, l lists.List, method string) error {
	if r.List != l.String() || r.Prefixes == nil {
		return fmt.Errorf("%s /v1/%s: the answer does not describe the %s list after the change (%+v): not applied as far as the CLI can tell", method, l, l, r)
	}
	return nil
}

// Metrics reads GET /metrics as text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	b, err := c.request(ctx, http.MethodGet, "/metrics", nil)
	return string(b), err
}

// Capture reads GET /v1/capture: a pcap of up to count dropped frames
// (one in sample) caught within seconds. Zero asks for the default.
func (c *Client) Capture(ctx context.Context, count, seconds, sample int) ([]byte, error) {
	q := url.Values{}
	for name, v := range map[string]int{"count": count, "seconds": seconds, "sample": sample} {
		if v != 0 {
			q.Set(name, strconv.Itoa(v))
		}
	}
	path := "/v1/capture"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.request(ctx, http.MethodGet, path, nil)
}

// LBService creates ("create") or replaces ("replace") a whole service.
func (c *Client) LBService(ctx context.Context, what string, sp api.LBServiceSpec) (api.LBService, error) {
	method := http.MethodPost
	switch what {
	case "create":
	case "replace":
		method = http.MethodPut
	default:
		return api.LBService{}, fmt.Errorf("unknown lb service change %q (want create or replace)", what)
	}
	var r api.LBService
	return r, c.do(ctx, method, "/v1/lb/services", sp, &r)
}

// LBDelete deletes a service.
func (c *Client) LBDelete(ctx context.Context, service string) error {
	var r api.LBService
	return c.do(ctx, http.MethodDelete, "/v1/lb/services", api.LBServiceRef{Service: service}, &r)
}

// LBMode changes a service's mode.
func (c *Client) LBMode(ctx context.Context, service, mode string) (api.LBService, error) {
	var r api.LBService
	return r, c.do(ctx, http.MethodPost, "/v1/lb/mode", api.LBServiceRef{Service: service, Mode: mode}, &r)
}

// LB reads GET /v1/lb.
func (c *Client) LB(ctx context.Context) (api.LBResponse, error) {
	var r api.LBResponse
	return r, c.do(ctx, http.MethodGet, "/v1/lb", nil, &r)
}

// LBChange adds ("add"), drains ("drain") or removes ("remove") backends of
// a service.
func (c *Client) LBChange(ctx context.Context, what, service string, backends []string) (api.LBService, error) {
	var method, path string
	switch what {
	case "add":
		method, path = http.MethodPost, "/v1/lb/backends"
	case "drain":
		method, path = http.MethodPost, "/v1/lb/drain"
	case "remove":
		method, path = http.MethodDelete, "/v1/lb/backends"
	default:
		return api.LBService{}, fmt.Errorf("unknown lb change %q (want add, drain or remove)", what)
	}
	var r api.LBService
	return r, c.do(ctx, method, path, api.LBChangeRequest{Service: service, Backends: backends}, &r)
}

// L7 reads GET /v1/l7.
func (c *Client) L7(ctx context.Context) (api.L7Response, error) {
	var r api.L7Response
	return r, c.do(ctx, http.MethodGet, "/v1/l7", nil, &r)
}

// L7Policy reads GET /v1/l7/policy: the L7 policy in force.
func (c *Client) L7Policy(ctx context.Context) (policy.Config, error) {
	var r policy.Config
	return r, c.do(ctx, http.MethodGet, "/v1/l7/policy", nil, &r)
}

// SetL7Policy replaces the L7 policy (PUT /v1/l7/policy), all or nothing.
func (c *Client) SetL7Policy(ctx context.Context, p policy.Config) (api.L7PolicyChange, error) {
	var r api.L7PolicyChange
	return r, c.do(ctx, http.MethodPut, "/v1/l7/policy", p, &r)
}

// XDPLB reads GET /v1/xdplb.
func (c *Client) XDPLB(ctx context.Context) (api.XDPLBResponse, error) {
	var r api.XDPLBResponse
	return r, c.do(ctx, http.MethodGet, "/v1/xdplb", nil, &r)
}

// XDPLBPut replaces the XDP balancer's configuration (PUT /v1/xdplb).
func (c *Client) XDPLBPut(ctx context.Context, cfg xdplb.Config) (api.XDPLBResponse, error) {
	var r api.XDPLBResponse
	return r, c.do(ctx, http.MethodPut, "/v1/xdplb", cfg, &r)
}
