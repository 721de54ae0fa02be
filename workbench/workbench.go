package workbench

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Prefix is where the page and its endpoints live.
const Prefix = "/workbench/"

// Defaults of Config.
const (
	DefaultInterval   = time.Second
	DefaultSessionTTL = time.Hour
	// maxStreams bounds the live streams served at once.
	maxStreams = 32
)

//go:embed static
var static embed.FS

// Config configures the page.
type Config struct {
	// Token is the service's operator token; Credential a separate
	// secret for the page. Either signs a visitor in; with neither, no
	// one can.
	Token, Credential string
	// NoAnonymous turns the read-only view off: the live data needs a
	// session too.
	NoAnonymous bool
	// SessionTTL is how long a session lasts (DefaultSessionTTL).
	SessionTTL time.Duration
	// Interval is the live stream's period (DefaultInterval).
	Interval time.Duration
	// Storm bounds the storms the page starts.
	Storm StormConfig
	// Logger receives sign-ins and storms (default slog.Default()).
	Logger *slog.Logger
}

// Workbench serves the page (an http.Handler for paths under Prefix).
type Workbench struct {
	cfg     Config
	log     *slog.Logger
	smp     *sampler
	ses     *sessions
	storm   *stormRunner
	streams atomic.Int32
	mux     *http.ServeMux
}

// New returns the page for src.
func New(src Source, cfg Config) *Workbench {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	w := &Workbench{cfg: cfg, log: cfg.Logger, smp: &sampler{src: src, interval: cfg.Interval},
		ses: newSessions(cfg.SessionTTL, cfg.Token, cfg.Credential), mux: http.NewServeMux()}
	w.storm = newStormRunner(cfg.Storm, cfg.Logger)
	if w.storm.binErr != nil {
		w.log.Warn("workbench: storms cannot be started", "err", w.storm.binErr)
	}
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	w.mux.HandleFunc("GET "+Prefix+"{$}", func(rw http.ResponseWriter, r *http.Request) {
		page, _ := static.ReadFile("static/index.html")
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Write(page)
	})
	w.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", files))
	w.mux.HandleFunc("GET "+Prefix+"events", w.events)
	w.mux.HandleFunc("GET "+Prefix+"session", w.session)
	w.mux.HandleFunc("POST "+Prefix+"signin", w.signin)
	w.mux.HandleFunc("POST "+Prefix+"signout", w.change(w.signout))
	w.mux.HandleFunc("POST "+Prefix+"storm", w.change(w.startStorm))
	w.mux.HandleFunc("GET "+Prefix+"storm/result", w.stormResult)
	w.mux.HandleFunc(Prefix, func(rw http.ResponseWriter, r *http.Request) {
		writeError(rw, http.StatusNotFound, fmt.Errorf("no such workbench endpoint %s %s", r.Method, r.URL.Path))
	})
	return w
}

func init() {
	// The page's types, whatever the system's mime tables say.
	mime.AddExtensionType(".js", "text/javascript; charset=utf-8")
	mime.AddExtensionType(".css", "text/css; charset=utf-8")
}

// ServeHTTP implements http.Handler.
func (w *Workbench) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	h := rw.Header()
	// Nothing from elsewhere, no framing, no sniffing.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.mux.ServeHTTP(rw, r)
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	json.NewEncoder(rw).Encode(v)
}

func writeError(rw http.ResponseWriter, code int, err error) {
	writeJSON(rw, code, map[string]string{"error": err.Error()})
}

// Close stops a running storm and waits for it to end (the service
// calls it when it stops); no storm starts after it.
func (w *Workbench) Close() { w.storm.close() }

// SignedIn reports whether r carries a live session's cookie.
func (w *Workbench) SignedIn(r *http.Request) bool { return w.ses.with(r, time.Now(), nil) }

// mayRead reports whether r may see the live data.
func (w *Workbench) mayRead(r *http.Request) bool { return !w.cfg.NoAnonymous || w.SignedIn(r) }

// change wraps a handler that changes something: it needs a live session
// and its CSRF token in CSRFHeader.
func (w *Workbench) change(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		var ss *session
		var csrf bool
		if !w.ses.with(r, time.Now(), func(s *session) { ss, csrf = s, csrfOK(s, r) }) {
			writeError(rw, http.StatusUnauthorized, errors.New("sign in first"))
			return
		}
		if !csrf {
			w.log.Warn("workbench: change without its CSRF token refused", "path", r.URL.Path, "remote", r.RemoteAddr)
			writeError(rw, http.StatusForbidden, errors.New("missing or wrong CSRF token"))
			return
		}
		h(rw, r, ss)
	}
}

// SessionInfo answers GET Prefix+"session".
type SessionInfo struct {
	SignedIn  bool   `json:"signed_in"`
	CSRF      string `json:"csrf,omitempty"`
	Expires   int64  `json:"expires,omitempty"` // Unix ms
	Anonymous bool   `json:"anonymous_view"`    // the read-only view is on
	// StormsLeft is how many storms this session may still start this
	// hour; StormProblem why none can be started at all.
	StormsLeft   int      `json:"storms_left"`
	StormProblem string   `json:"storm_problem,omitempty"`
	Scenarios    []string `json:"scenarios"`
}

func (w *Workbench) session(rw http.ResponseWriter, r *http.Request) {
	info := SessionInfo{Anonymous: !w.cfg.NoAnonymous, Scenarios: Scenarios}
	now := time.Now()
	w.ses.with(r, now, func(s *session) {
		info.SignedIn, info.CSRF, info.Expires = true, s.csrf, s.expires.UnixMilli()
		info.StormsLeft = w.storm.cfg.PerHour - recent(s.starts, now)
	})
	if w.storm.binErr != nil {
		info.StormProblem = w.storm.binErr.Error()
	}
	writeJSON(rw, http.StatusOK, info)
}

func recent(starts []time.Time, now time.Time) int {
	n := 0
	for _, t := range starts {
		if now.Sub(t) < time.Hour {
			n++
		}
	}
	return n
}

// SignIn is the body of POST Prefix+"signin".
type SignIn struct {
	Token string `json:"token"`
}

func (w *Workbench) signin(rw http.ResponseWriter, r *http.Request) {
	// A JSON body only: a form posted from another site cannot send one
	// without the browser asking this origin first (CORS preflight).
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(rw, http.StatusUnsupportedMediaType, errors.New("sign-in takes a JSON body"))
		return
	}
	var in SignIn
	if err := json.NewDecoder(io.LimitReader(r.Body, 8192)).Decode(&in); err != nil {
		writeError(rw, http.StatusBadRequest, fmt.Errorf("sign-in: %v", err))
		return
	}
	now := time.Now()
	if !w.ses.check(in.Token) {
		if w.ses.throttled(now) {
			writeError(rw, http.StatusTooManyRequests, errors.New("too many failed sign-ins; wait"))
			return
		}
		w.log.Warn("workbench: sign-in refused", "remote", r.RemoteAddr)
		writeError(rw, http.StatusUnauthorized, errors.New("wrong token"))
		return
	}
	w.ses.close(r)
	id, _, ok := w.ses.open(now)
	if !ok {
		writeError(rw, http.StatusServiceUnavailable, fmt.Errorf("%d sessions are open; try again later", maxSessions))
		return
	}
	http.SetCookie(rw, &http.Cookie{Name: CookieName, Value: id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(w.cfg.SessionTTL.Seconds())})
	w.log.Info("workbench: signed in", "remote", r.RemoteAddr)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: id})
	w.session(rw, r)
}

func (w *Workbench) signout(rw http.ResponseWriter, r *http.Request, _ *session) {
	w.ses.close(r)
	http.SetCookie(rw, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	writeJSON(rw, http.StatusOK, SessionInfo{Anonymous: !w.cfg.NoAnonymous, Scenarios: Scenarios})
}

// StormRequest is the body of POST Prefix+"storm".
type StormRequest struct {
	Scenario string `json:"scenario"` // few, many or both
	Contrast bool   `json:"contrast"` // also without the shield
}

func (w *Workbench) startStorm(rw http.ResponseWriter, r *http.Request, ss *session) {
	var in StormRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 8192))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(rw, http.StatusBadRequest, fmt.Errorf("storm: %v", err))
		return
	}
	if !slices.Contains(Scenarios, in.Scenario) {
		writeError(rw, http.StatusBadRequest, fmt.Errorf("storm: scenario %q: want one of %s", in.Scenario, strings.Join(Scenarios, ", ")))
		return
	}
	now := time.Now()
	var left int
	w.ses.with(r, now, func(s *session) { left = w.storm.cfg.PerHour - recent(s.starts, now) })
	if left <= 0 {
		writeError(rw, http.StatusTooManyRequests, fmt.Errorf("this session started %d storms in the last hour; that is the limit", w.storm.cfg.PerHour))
		return
	}
	if err := w.storm.start(in.Scenario, in.Contrast); err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, errBusy):
			code = http.StatusConflict
		case errors.Is(err, errUnavailable):
			code = http.StatusServiceUnavailable
		}
		writeError(rw, code, err)
		return
	}
	w.ses.with(r, now, func(s *session) { s.starts = append(s.starts, now) })
	w.log.Info("workbench: storm started by a session", "remote", r.RemoteAddr, "scenario", in.Scenario)
	writeJSON(rw, http.StatusAccepted, w.storm.snapshot())
}

func (w *Workbench) stormResult(rw http.ResponseWriter, r *http.Request) {
	if !w.mayRead(r) {
		writeError(rw, http.StatusUnauthorized, errors.New("sign in first"))
		return
	}
	w.storm.mu.Lock()
	res := w.storm.result
	w.storm.mu.Unlock()
	if res == nil {
		writeError(rw, http.StatusNotFound, errors.New("no storm has finished yet"))
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Content-Disposition", `attachment; filename="storm.json"`)
	rw.Write(res)
}

// events streams a Sample every Interval (Server-Sent Events).
func (w *Workbench) events(rw http.ResponseWriter, r *http.Request) {
	if !w.mayRead(r) {
		writeError(rw, http.StatusUnauthorized, errors.New("sign in first (the read-only view is off)"))
		return
	}
	if w.streams.Add(1) > maxStreams {
		w.streams.Add(-1)
		writeError(rw, http.StatusServiceUnavailable, fmt.Errorf("%d live streams are open; try again later", maxStreams))
		return
	}
	defer w.streams.Add(-1)
	rc := http.NewResponseController(rw)
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.WriteHeader(http.StatusOK)
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		// The stream ends when the session it needs ends.
		if !w.mayRead(r) {
			return
		}
		smp := w.smp.sample(r.Context())
		smp.Storm = w.storm.snapshot()
		b, _ := json.Marshal(smp)
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(rw, "event: sample\ndata: %s\n\n", b); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}
