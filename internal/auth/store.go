package auth

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// DefaultCheckEvery is how often, at most, a Store looks whether its file
// changed.
const DefaultCheckEvery = time.Second

// StoreOptions configure a Store.
type StoreOptions struct {
	// CheckEvery is how often, at most, the file is looked at for a change
	// (default 1 s). The look happens on a call that presents a token.
	CheckEvery time.Duration
	// Clock times the looks (default clock.Real).
	Clock  clock.Clock
	Logger *slog.Logger
}

// Store holds the tokens of a token file, reloaded when the file changes
// (doc.go), and authenticates requests against them. It is safe for
// concurrent use.
type Store struct {
	path string
	opts StoreOptions

	tokens atomic.Pointer[Tokens]
	// nextCheck is when (clock.Now().UnixNano()) the file is looked at
	// next; a call that finds it due moves it on and looks.
	nextCheck atomic.Int64

	mu sync.Mutex // one reload at a time; guards the fields below
	// loaded is the file as last read (nil: never read).
	loaded os.FileInfo
	// failed is the file whose reload failed, so that an unchanged broken
	// file is not reread and logged at every look; gone says the file was
	// missing at the last look (and was logged then).
	failed os.FileInfo
	gone   bool
}

// Open reads the token file at path. Unlike a reload, it fails if the
// file is missing or does not parse.
func Open(path string, opts StoreOptions) (*Store, error) {
	if opts.CheckEvery <= 0 {
		opts.CheckEvery = DefaultCheckEvery
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: path, opts: opts}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w (make one with tenure token create --auth-file %s)", err, path)
	}
	t, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	s.tokens.Store(t)
	s.loaded = st
	s.nextCheck.Store(opts.Clock.Now().Add(opts.CheckEvery).UnixNano())
	return s, nil
}

// Path is the token file's path.
func (s *Store) Path() string { return s.path }

// Tokens returns the tokens in force.
func (s *Store) Tokens() *Tokens { return s.tokens.Load() }

// Reload rereads the token file now. If it is gone or does not parse, the
// tokens loaded before stay in force, the error is logged and returned.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(true)
}

// reloadLocked rereads the file; unless force, only if it changed since it
// was last read, or last failed to be.
func (s *Store) reloadLocked(force bool) error {
	st, err := os.Stat(s.path)
	if !force {
		switch {
		case err == nil && (sameFile(st, s.loaded) || sameFile(st, s.failed)):
			s.gone = false
			return nil
		case err != nil && s.gone:
			return err // reported when it went
		}
	}
	var t *Tokens
	if err == nil {
		t, err = ReadFile(s.path)
	}
	if err != nil {
		s.failed, s.gone = st, st == nil
		s.opts.Logger.Error("token file not reloaded: the tokens loaded before stay in force; fix the file (it is tried again when it changes, and on SIGHUP)",
			"path", s.path, "tokens", len(s.tokens.Load().Entries), "err", err)
		return err
	}
	s.tokens.Store(t)
	s.loaded, s.failed, s.gone = st, nil, false
	s.opts.Logger.Info("token file reloaded", "path", s.path, "tokens", len(t.Entries))
	return nil
}

// sameFile reports whether a and b describe the same, unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// maybeReload looks whether the file changed, at most once per
// CheckEvery.
func (s *Store) maybeReload() {
	now := s.opts.Clock.Now().UnixNano()
	next := s.nextCheck.Load()
	if now < next || !s.nextCheck.CompareAndSwap(next, now+int64(s.opts.CheckEvery)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked(false) // logged
}

// Authenticate returns the principal of the bearer token in h's
// Authorization header. Its error (unauthenticated) says what is wrong
// without repeating the token.
func (s *Store) Authenticate(h http.Header) (*Principal, error) {
	s.maybeReload()
	values := h.Values("Authorization")
	if len(values) > 1 {
		return nil, fmt.Errorf("%d Authorization headers: send exactly one, Authorization: Bearer <token>", len(values))
	}
	var value string
	if len(values) == 1 {
		value = values[0]
	}
	token, err := ParseAuthorization(value)
	if err != nil {
		return nil, err
	}
	return s.tokens.Load().authenticate(token)
}

// Named returns the principal of the token named name, for a call that a
// node of the cluster forwards for that token (the node checked the token;
// this node authorises the principal with its own file). Its error
// (unauthenticated) says what to do.
func (s *Store) Named(name string) (*Principal, error) {
	s.maybeReload()
	e := s.tokens.Load().Named(name)
	if e == nil {
		if name == "" {
			return nil, fmt.Errorf("the node that forwarded this call named no caller: authentication is off there; give every node of the cluster the same --auth-file")
		}
		return nil, fmt.Errorf("the node that forwarded this call names token %q, which this node's token file does not hold: give every node of the cluster the same --auth-file", name)
	}
	return &e.Principal, nil
}

// dummy is compared with the hash of a token whose id is unknown, so that
// an unknown id takes as long as a wrong secret.
var dummy Hash

// authenticate returns the principal of token.
func (t *Tokens) authenticate(token string) (*Principal, error) {
	id, err := TokenID(token)
	if err != nil {
		return nil, err
	}
	want := &dummy
	e := t.lookup(id)
	if e != nil {
		want = &e.Hash
	}
	got := HashOf(token)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || e == nil {
		return nil, fmt.Errorf("unknown token tnr_%s_…: it was revoked, or is not in this server's token file; ask its operator for a token (tenure token create)", id)
	}
	return &e.Principal, nil
}
