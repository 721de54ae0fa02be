package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/xdplb"
)

// Log attribute keys.
const (
	keyWho    = "who"
	keyRemote = "remote"
	keyWhat   = "what"
	keyOld    = "old"
	keyNew    = "new"
	keyErr    = "err"
	keyMethod = "method"
	keyPath   = "path"
	keyReason = "reason"
	keyItems  = "prefixes"
	// keyClaimed is the operator name an unauthorized request gave.
	keyClaimed = "claimed_operator"
	// keySuppressed counts the unauthorized requests not logged since the
	// last line.
	keySuppressed = "suppressed"
)

// Defaults of Options.
const (
	DefaultMaxBody    = 1 << 20 // bytes of a request body
	DefaultTopN       = 10
	DefaultTopTimeout = 5 * time.Second
	// sourceCountTTL is how long a count of the sources table is reused
	// by /v1/counters and /metrics: a count walks the whole table.
	sourceCountTTL = time.Second
)

// OperatorHeader names the operator in the change logs (free text, set by
// the CLI to user@host); the remote address is logged as well.
const OperatorHeader = "X-Shield-Operator"

// Options configure a Server.
type Options struct {
	// Token is the operator token changes need (Authorization: Bearer).
	// Empty refuses every change.
	Token string
	// AuthReads makes reads need the token too.
	AuthReads bool
	// MaxBody bounds request bodies (default DefaultMaxBody).
	MaxBody int64
	// TopTimeout bounds one top-talkers walk (default DefaultTopTimeout).
	TopTimeout time.Duration
	// Logger receives change and 401 logs (default slog.Default()).
	Logger *slog.Logger
	// Build labels shield_build_info.
	Build BuildInfo
	// Info is answered by GET /v1/info.
	Info Info
	// NoProcessMetrics leaves the Go and process collectors out of the
	// registry (for several servers in one test process).
	NoProcessMetrics bool
	// Health says whether the program protects the interface now, and
	// if not why (GET /v1/health, /v1/info, shield_attached). Nil: always.
	Health func() (ok bool, problem string)
	// LB, when set, is the socket balancer served under /v1/lb (lb.go).
	LB *lb.LB
	// XDPLB, when set, is the XDP balancer served under /v1/xdplb
	// (xdplb.go).
	XDPLB *xdplb.Balancer
	// L7, when set, is the L7 proxy served under /v1/l7 (l7.go).
	L7 *l7.Server
}

// Server serves the /v1 contract and /metrics for one shield.
type Server struct {
	sh      *shield.Shield
	opts    Options
	log     *slog.Logger
	token   [sha256.Size]byte
	mux     *http.ServeMux
	reg     *prometheus.Registry
	reqs    *prometheus.CounterVec
	topSem  chan struct{} // one table walk at a time
	countMu sync.Mutex
	count   int
	countAt time.Time
	// denyLog bounds the rate of "api unauthorized" lines.
	denyLog logLimiter
}

// logLimiter lets a burst of logLimitBurst lines through, then one per
// second, and counts what it held back.
type logLimiter struct {
	once       sync.Once
	mu         sync.Mutex
	lim        *rate.Limiter // one line a second, logLimitBurst at once (golang.org/x/time/rate)
	suppressed int
}

const logLimitBurst = 10

// allow reports whether a line may be written now and how many were held
// back since the last one.
func (l *logLimiter) allow(now time.Time) (int, bool) {
	l.once.Do(func() { l.lim = rate.NewLimiter(1, logLimitBurst) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lim.AllowN(now, 1) {
		l.suppressed++
		return 0, false
	}
	n := l.suppressed
	l.suppressed = 0
	return n, true
}

// sanitize bounds a request-supplied string for the logs.
func sanitize(s string) string {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return '_'
		}
		return c
	}, s)
}

// NewServer returns a Server for sh. It does not listen: serve it with
// net/http (it is an http.Handler).
func NewServer(sh *shield.Shield, opts Options) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.TopTimeout <= 0 {
		opts.TopTimeout = DefaultTopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		sh:     sh,
		opts:   opts,
		log:    opts.Logger,
		token:  sha256.Sum256([]byte(opts.Token)),
		mux:    http.NewServeMux(),
		topSem: make(chan struct{}, 1),
	}
	s.reg, s.reqs = newRegistry(s, opts)

	if s.opts.Info.Started.IsZero() {
		s.opts.Info.Started = time.Now()
	}
	s.mux.HandleFunc("GET /v1/info", s.read(s.getInfo))
	s.mux.HandleFunc("GET /v1/health", s.read(s.getHealth))
	s.mux.HandleFunc("GET /v1/counters", s.read(s.getCounters))
	s.mux.HandleFunc("GET /v1/top", s.read(s.getTop))
	s.mux.HandleFunc("GET /v1/limits", s.read(s.getLimits))
	s.mux.HandleFunc("PUT /v1/limits", s.change(s.putLimits))
	// Frames are sensitive: a capture always needs the token.
	s.mux.HandleFunc("GET /v1/capture", s.change(s.getCapture))
	for _, l := range []lists.List{lists.AllowList, lists.DenyList} {
		p := "/v1/" + l.String()
		s.mux.HandleFunc("GET "+p, s.read(func(w http.ResponseWriter, r *http.Request) { s.getList(w, r, l) }))
		s.mux.HandleFunc("POST "+p, s.change(func(w http.ResponseWriter, r *http.Request) { s.addList(w, r, l) }))
		s.mux.HandleFunc("DELETE "+p, s.change(func(w http.ResponseWriter, r *http.Request) { s.delList(w, r, l) }))
	}
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}})
	s.mux.HandleFunc("GET /metrics", s.read(metrics.ServeHTTP))
	allowed := map[string]string{
		"/v1/info": "GET", "/v1/health": "GET", "/v1/counters": "GET", "/v1/top": "GET", "/v1/limits": "GET, PUT", "/v1/capture": "GET",
		"/v1/allow": "GET, POST, DELETE", "/v1/deny": "GET, POST, DELETE", "/metrics": "GET",
	}
	if opts.LB != nil {
		s.registerLB(opts.LB, allowed)
	}
	if opts.L7 != nil {
		s.registerL7(opts.L7, allowed)
	}
	if opts.XDPLB != nil {
		s.registerXDPLB(opts.XDPLB, allowed)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if m, ok := allowed[r.URL.Path]; ok {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, m))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint %s %s", r.Method, r.URL.Path))
	})
	return s
}

// Registry is the server's own Prometheus registry (served at /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	// net/url drops the pairs it cannot parse; a request is answered as
	// written or not at all.
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		writeError(rec, http.StatusBadRequest, fmt.Errorf("malformed query string: %v", err))
	} else {
		s.mux.ServeHTTP(rec, r)
	}
	s.reqs.WithLabelValues(strconv.Itoa(rec.code)).Inc()
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

// Unwrap lets http.ResponseController reach the writer (capture flushes).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// who names the operator of r for the logs: at most 64 characters of
// letters, digits and ._@+- (anything else becomes _), so a header cannot
// forge log fields or lines.
func who(r *http.Request) string {
	op := r.Header.Get(OperatorHeader)
	if len(op) > 64 {
		op = op[:64]
	}
	op = strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune("._@+-", c):
			return c
		}
		return '_'
	}, op)
	if op == "" {
		return "unnamed"
	}
	return op
}

// authorized reports whether r carries the operator token; the comparison
// takes the same time whatever the token presented.
func (s *Server) authorized(r *http.Request) (bool, string) {
	if s.opts.Token == "" {
		return false, "no operator token configured: changes are disabled"
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false, "missing bearer token"
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
		return false, "invalid token"
	}
	return true, ""
}

func (s *Server) deny(w http.ResponseWriter, r *http.Request, reason string) {
	// A flood of unauthorized requests must not become a flood of log
	// lines: a few per second, then one line saying how many were not
	// logged. The operator a stranger claims to be is theirs to choose:
	// it is logged as a claim, never as who.
	if n, ok := s.denyLog.allow(time.Now()); ok {
		args := []any{keyMethod, r.Method, keyPath, sanitize(r.URL.Path), keyClaimed, who(r),
			keyRemote, r.RemoteAddr, keyReason, reason}
		if n > 0 {
			args = append(args, keySuppressed, n)
		}
		s.log.Warn("api unauthorized", args...)
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="xdpshield"`)
	writeError(w, http.StatusUnauthorized, errors.New(reason))
}

func (s *Server) read(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AuthReads {
			if ok, reason := s.authorized(r); !ok {
				s.deny(w, r, reason)
				return
			}
		}
		h(w, r)
	}
}

func (s *Server) change(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ok, reason := s.authorized(r); !ok {
			s.deny(w, r, reason)
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, ErrorResponse{Error: err.Error()})
}

// badRequest is a client error: answered 400, nothing changed.
type badRequest struct{ error }

func badf(format string, args ...any) error { return badRequest{fmt.Errorf(format, args...)} }

func (s *Server) fail(w http.ResponseWriter, err error) {
	var br badRequest
	if errors.As(err, &br) {
		writeError(w, http.StatusBadRequest, br.error)
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	s.log.Error("api request failed", keyErr, err)
	writeError(w, http.StatusInternalServerError, err)
}

// decode reads r's body into v strictly: one JSON value, no unknown
// fields, at most MaxBody bytes.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return badf("request body exceeds %d bytes", mbe.Limit)
		}
		return badf("read request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badf("empty request body: a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err == nil {
		if err := checkKeys(body, reflect.TypeOf(v)); err != nil {
			return err
		}
	} else {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badf("malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			if te.Field != "" {
				return badf("field %q: %s is not a valid %s", te.Field, te.Value, jsonKind(te))
			}
			return badf("body: %s is not a valid %s", te.Value, jsonKind(te))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badf("malformed JSON: unexpected end of body")
		}
		return badf("malformed JSON: %v", err)
	}
	if dec.More() {
		return badf("malformed JSON: trailing data after the object")
	}
	return nil
}

func jsonKind(te *json.UnmarshalTypeError) string {
	switch te.Type.Kind().String() {
	case "uint64", "uint32", "uint", "int", "int64":
		return "non-negative integer"
	case "slice":
		return "array"
	case "struct":
		return "object"
	}
	return te.Type.String()
}

func (s *Server) sourceCount(ctx context.Context) (int, error) {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	if !s.countAt.IsZero() && time.Since(s.countAt) < sourceCountTTL {
		return s.count, nil
	}
	n, err := s.sh.CountSources(ctx)
	if err != nil {
		return 0, err
	}
	s.count, s.countAt = n, time.Now()
	return n, nil
}

// health asks Options.Health.
func (s *Server) health() (bool, string) {
	if s.opts.Health == nil {
		return true, ""
	}
	return s.opts.Health()
}

func (s *Server) getInfo(w http.ResponseWriter, r *http.Request) {
	info := s.opts.Info
	info.UptimeSeconds = time.Since(info.Started).Round(time.Millisecond).Seconds()
	info.Healthy, info.Problem = s.health()
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) {
	ok, problem := s.health()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, HealthResponse{Healthy: ok, Problem: problem})
}

func (s *Server) getCounters(w http.ResponseWriter, r *http.Request) {
	c, err := s.sh.Counters()
	if err != nil {
		s.fail(w, err)
		return
	}
	bytes, err := s.sh.Bytes()
	if err != nil {
		s.fail(w, err)
		return
	}
	n, err := s.sourceCount(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	ev, err := s.sh.Evictions()
	if err != nil {
		s.fail(w, err)
		return
	}
	resp := CountersResponse{
		Verdicts: map[string]uint64{},
		Reasons:  map[string]uint64{},
		Sources:  SourceStats{Tracked: n, Capacity: s.sh.TableSize(), Evictions: ev},
	}
	for _, v := range counter.Verdicts() {
		resp.Verdicts[v.String()] = c.Verdict(v)
		for _, rs := range counter.Reasons() {
			for _, p := range counter.Protos() {
				resp.Packets = append(resp.Packets, PacketCount{Verdict: v.String(), Reason: rs.String(), Proto: p.String(), Packets: c[v][rs][p], Bytes: bytes[v][rs][p]})
			}
		}
	}
	for _, rs := range counter.Reasons() {
		resp.Reasons[rs.String()] = c.Reason(rs)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) getTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "n" && k != "by" {
			s.fail(w, badf("unknown query parameter %q (want n, by)", k))
			return
		}
	}
	n := DefaultTopN
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > source.MaxTop {
			s.fail(w, badf("n=%q: want an integer in [1, %d]", v, source.MaxTop))
			return
		}
	}
	by := source.ByDropped
	if v := q.Get("by"); v != "" {
		var err error
		if by, err = source.ParseTopOrder(v); err != nil {
			s.fail(w, badRequest{err})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.TopTimeout)
	defer cancel()
	select {
	case s.topSem <- struct{}{}:
		defer func() { <-s.topSem }()
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, errors.New("another top-talkers walk is running; try again"))
		return
	}
	start := time.Now()
	top, st, err := s.sh.Top(ctx, n, by)
	if err != nil {
		s.fail(w, err)
		return
	}
	if top == nil {
		top = []source.Source{}
	}
	writeJSON(w, http.StatusOK, TopResponse{
		By: by.String(), N: n, Scanned: st.Scanned,
		ElapsedMs: float64(time.Since(start).Microseconds()) / 1000, Sources: top,
	})
}

func (s *Server) getLimits(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.sh.Limits())
}

func (s *Server) putLimits(w http.ResponseWriter, r *http.Request) {
	var l config.Limits
	if err := s.decode(w, r, &l); err != nil {
		s.fail(w, err)
		return
	}
	// One check, the shield's: Validate and what the clock can honour.
	old, err := s.sh.ReplaceLimits(l)
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			s.fail(w, badf("limits: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
			return
		}
		s.fail(w, fmt.Errorf("set limits: %w", err))
		return
	}
	l = s.sh.Limits()
	s.log.Info("limits changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "limits",
		keyOld, old, keyNew, l)
	writeJSON(w, http.StatusOK, LimitsChange{Old: old, New: l})
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func (s *Server) getList(w http.ResponseWriter, r *http.Request, l lists.List) {
	ps, err := s.sh.List(l)
	if err != nil {
		s.fail(w, err)
		return
	}
	hits, err := s.sh.ListHits(l)
	if err != nil {
		s.fail(w, err)
		return
	}
	resp := ListResponse{List: l.String(), Prefixes: prefixStrings(ps), Hits: make(map[string]uint64, len(ps))}
	for _, p := range ps {
		resp.Hits[p.String()] = hits[p]
	}
	writeJSON(w, http.StatusOK, resp)
}

// prefixes decodes and validates a whole batch.
func (s *Server) prefixes(w http.ResponseWriter, r *http.Request) ([]netip.Prefix, error) {
	var req PrefixesRequest
	if err := s.decode(w, r, &req); err != nil {
		return nil, err
	}
	if len(req.Prefixes) == 0 {
		return nil, badf("prefixes: at least one CIDR is required")
	}
	if len(req.Prefixes) > shield.MaxListEntries {
		return nil, badf("prefixes: %d in one batch; the limit is %d", len(req.Prefixes), shield.MaxListEntries)
	}
	ps, err := lists.ParsePrefixes(req.Prefixes)
	if err != nil {
		return nil, badf("prefixes: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return ps, nil
}

func (s *Server) addList(w http.ResponseWriter, r *http.Request, l lists.List) {
	s.changeList(w, r, l, "add", s.sh.Add)
}

func (s *Server) delList(w http.ResponseWriter, r *http.Request, l lists.List) {
	s.changeList(w, r, l, "del", s.sh.Remove)
}

// changeList applies a validated batch to list l with apply (shield's Add
// or Remove, which check it whole against the list: config.ErrInvalid is
// the client's error), then answers and logs what changed.
func (s *Server) changeList(w http.ResponseWriter, r *http.Request, l lists.List, verb string,
	apply func(lists.List, []netip.Prefix) (lists.ListChange, error)) {
	ps, err := s.prefixes(w, r)
	if err != nil {
		s.fail(w, err)
		return
	}
	// The change reports what it did, read under the shield's own lock:
	// racing changes each report their own prefixes.
	ch, err := apply(l, ps)
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			s.fail(w, badRequest{err})
			return
		}
		s.fail(w, fmt.Errorf("%s %s list: %w", verb, l, err))
		return
	}
	resp := ListResponse{List: l.String(), Prefixes: prefixStrings(ch.After)}
	var changed []string
	if verb == "add" {
		changed = prefixStrings(ch.Added)
		resp.Added = changed
	} else {
		changed = prefixStrings(ch.Removed)
		resp.Removed = changed
	}
	s.log.Info("list changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, l.String()+" "+verb,
		keyItems, changed, keyOld, ch.Before, keyNew, len(ch.After))
	writeJSON(w, http.StatusOK, resp)
}

// slogPrinter adapts a slog.Logger to promhttp's ErrorLog.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Error("metrics", keyErr, fmt.Sprint(v...)) }

// Authenticated reports whether r carries the operator token (never when
// no token is configured). The service's connection guard keeps the slots
// it holds back for such requests (service).
func (s *Server) Authenticated(r *http.Request) bool {
	ok, _ := s.authorized(r)
	return ok
}
