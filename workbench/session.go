package workbench

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// CookieName is the session cookie; CSRFHeader carries the session's CSRF
// token on every change.
const (
	CookieName = "shield_wb"
	CSRFHeader = "X-CSRF-Token"
	// maxSessions bounds the sessions held at once; a sign-in beyond it
	// is refused until one expires or signs out.
	maxSessions = 64
	// failBurst sign-in failures are answered at once, then one a
	// failEvery: guessing the token by the page is as slow as by the API.
	failBurst = 5
	failEvery = 2 * time.Second
)

type session struct {
	csrf    string
	expires time.Time
	starts  []time.Time // storms started, for the hourly bound
}

// sessions are the signed-in visitors, by the SHA-256 of their cookie (a
// memory dump holds no usable cookie).
type sessions struct {
	ttl     time.Duration
	secrets [][sha256.Size]byte // the accepted sign-in secrets' digests
	mu      sync.Mutex
	byID    map[[sha256.Size]byte]*session
	credit  float64
	last    time.Time
}

func newSessions(ttl time.Duration, secrets ...string) *sessions {
	s := &sessions{ttl: ttl, byID: map[[sha256.Size]byte]*session{}, credit: failBurst}
	for _, sec := range secrets {
		if sec != "" {
			s.secrets = append(s.secrets, sha256.Sum256([]byte(sec)))
		}
	}
	return s
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// check reports whether secret is one of the accepted ones, in time that
// does not depend on which or how much of it matched.
func (s *sessions) check(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	ok := 0
	for _, want := range s.secrets {
		ok |= subtle.ConstantTimeCompare(sum[:], want[:])
	}
	return ok == 1 && secret != ""
}

// throttled reports whether a failed sign-in must wait (and counts one).
func (s *sessions) throttled(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() {
		s.credit = min(failBurst, s.credit+now.Sub(s.last).Seconds()/failEvery.Seconds())
	}
	s.last = now
	if s.credit < 1 {
		return true
	}
	s.credit--
	return false
}

// open makes a session and returns its cookie value and CSRF token; ok is
// false when maxSessions are live.
func (s *sessions) open(now time.Time) (id, csrf string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	if len(s.byID) >= maxSessions {
		return "", "", false
	}
	id, csrf = randomToken(), randomToken()
	s.byID[sha256.Sum256([]byte(id))] = &session{csrf: csrf, expires: now.Add(s.ttl)}
	return id, csrf, true
}

func (s *sessions) expire(now time.Time) {
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
}

// get returns r's live session (locked by s.mu while fn runs), or nil.
func (s *sessions) with(r *http.Request, now time.Time, fn func(*session)) bool {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return false
	}
	key := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byID[key]
	if !ok {
		return false
	}
	if !now.Before(ss.expires) {
		delete(s.byID, key)
		return false
	}
	if fn != nil {
		fn(ss)
	}
	return true
}

func (s *sessions) close(r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.mu.Lock()
		delete(s.byID, sha256.Sum256([]byte(c.Value)))
		s.mu.Unlock()
	}
}

// csrfOK reports whether r carries its session's CSRF token.
func csrfOK(ss *session, r *http.Request) bool {
	got := r.Header.Get(CSRFHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}
