package auth

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// The token file's format (doc.go).
const (
	fileFormat  = "tenure-tokens"
	fileVersion = 1
	// maxLine bounds one line of the file, so that a damaged file cannot
	// make the server read it into memory whole.
	maxLine = 64 << 10
	// maxNameLen bounds a token's name.
	maxNameLen = 64
)

// Entry is one token of the file: who it names, and how to recognise it.
type Entry struct {
	Principal
	// ID is the token's non-secret id.
	ID string
	// Hash is the SHA-256 of the whole token.
	Hash Hash
	// Created is when `tenure token create` made it (zero if unknown).
	Created time.Time
}

// Tokens are the tokens of one token file.
type Tokens struct {
	// Entries in the file's order.
	Entries []Entry
	byID    map[string]int // index in Entries
}

// lookup returns the entry with token id id, or nil.
func (t *Tokens) lookup(id string) *Entry {
	if i, ok := t.byID[id]; ok {
		return &t.Entries[i]
	}
	return nil
}

// Named returns the entry named name, or nil.
func (t *Tokens) Named(name string) *Entry {
	for i := range t.Entries {
		if t.Entries[i].Name == name {
			return &t.Entries[i]
		}
	}
	return nil
}

// header is the file's first line.
type header struct {
	Format  string `json:"format"`
	Version *int   `json:"version"`
}

// line is one token's line.
type line struct {
	Name       string   `json:"name"`
	Role       string   `json:"role"`
	Namespaces []string `json:"namespaces"`
	Queues     []string `json:"queues,omitempty"`
	ID         string   `json:"id"`
	SHA256     string   `json:"sha256"`
	Created    string   `json:"created,omitempty"`
}

// Parse reads a token file; name (the file's path) prefixes its errors,
// which give the line and what to fix.
func Parse(r io.Reader, name string) (*Tokens, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	t := &Tokens{byID: map[string]int{}}
	n, seenHeader := 0, false
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if !seenHeader {
			if err := parseHeader(text); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
			seenHeader = true
			continue
		}
		e, err := parseLine(text)
		if err == nil {
			err = t.add(e)
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: a line is longer than %d bytes: this is not a token file", name, n+1, maxLine)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !seenHeader {
		return nil, fmt.Errorf(`%s: no header line {"format":%q,"version":%d}: this is not a token file (make one with tenure token create)`, name, fileFormat, fileVersion)
	}
	return t, nil
}

// add adds e, refusing a second entry with its name or id.
func (t *Tokens) add(e Entry) error {
	if t.Named(e.Name) != nil {
		return fmt.Errorf("a second token named %q: names are unique (revoke one)", e.Name)
	}
	if t.lookup(e.ID) != nil {
		return fmt.Errorf("token %q has the id %s of another token: ids are unique (revoke it and create a new one)", e.Name, e.ID)
	}
	t.byID[e.ID] = len(t.Entries)
	t.Entries = append(t.Entries, e)
	return nil
}

// strictUnmarshal decodes one JSON object into v, refusing unknown fields
// and anything after the object.
func strictUnmarshal(text string, v any) error {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more after the JSON object: one object per line")
	}
	return nil
}

func parseHeader(text string) error {
	var h header
	if err := strictUnmarshal(text, &h); err != nil || h.Format != fileFormat || h.Version == nil {
		return fmt.Errorf(`the first line is not the header {"format":%q,"version":%d}: this is not a token file (make one with tenure token create)`, fileFormat, fileVersion)
	}
	if *h.Version != fileVersion {
		return fmt.Errorf("token file version %d: this tenure reads version %d only (a newer tenure wrote it?)", *h.Version, fileVersion)
	}
	return nil
}

func parseLine(text string) (Entry, error) {
	var l line
	if err := strictUnmarshal(text, &l); err != nil {
		return Entry{}, fmt.Errorf("not a token's JSON object (%v): see the token file's format in internal/auth/doc.go", err)
	}
	role, err := ParseRole(l.Role)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Principal: Principal{Name: l.Name, Role: role, Namespaces: l.Namespaces, Queues: l.Queues}, ID: l.ID}
	if err := e.Principal.Validate(); err != nil {
		return Entry{}, err
	}
	if len(l.ID) != idLen || !isLowerHex(l.ID) {
		return Entry{}, fmt.Errorf("token %q: id %q is not %d lowercase hex digits", l.Name, l.ID, idLen)
	}
	h, err := hex.DecodeString(l.SHA256)
	if err != nil || len(h) != len(e.Hash) || !isLowerHex(l.SHA256) {
		return Entry{}, fmt.Errorf("token %q: sha256 is not %d lowercase hex digits", l.Name, 2*len(e.Hash))
	}
	copy(e.Hash[:], h)
	if l.Created != "" {
		if e.Created, err = time.Parse(time.RFC3339, l.Created); err != nil {
			return Entry{}, fmt.Errorf("token %q: created %q is not an RFC 3339 time", l.Name, l.Created)
		}
	}
	return e, nil
}

// Validate checks a principal's name, role and scope, as a token file
// holds them, and says what to fix.
func (p *Principal) Validate() error {
	if err := ValidName(p.Name); err != nil {
		return err
	}
	if !slices.Contains(Roles, p.Role) {
		return fmt.Errorf("token %q: role %q is unknown: use admin, submitter, worker or reader", p.Name, p.Role)
	}
	if len(p.Namespaces) == 0 {
		return fmt.Errorf("token %q has no namespaces: list the namespaces it may act in, or * for every one", p.Name)
	}
	if err := validScope(p.Namespaces, "namespace"); err != nil {
		return fmt.Errorf("token %q: %w", p.Name, err)
	}
	switch {
	case p.Role == Worker && len(p.Queues) == 0:
		return fmt.Errorf("token %q is a worker token without queues: list the queues it may work on, or * for every queue of its namespaces", p.Name)
	case p.Role != Worker && len(p.Queues) > 0:
		return fmt.Errorf("token %q: queues are for worker tokens only; a %s token covers every queue of its namespaces", p.Name, p.Role)
	}
	if err := validScope(p.Queues, "queue"); err != nil {
		return fmt.Errorf("token %q: %w", p.Name, err)
	}
	return nil
}

// ValidName returns an error unless name can name a token.
func ValidName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("token name %q is not 1 to %d characters", name, maxNameLen)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._@:-", c)
		if !ok {
			return fmt.Errorf("token name %q has %q: use letters, digits and ._@:- only", name, c)
		}
	}
	return nil
}

// validScope checks a list of namespaces or queues (kind): valid names,
// no repeats, * alone.
func validScope(l []string, kind string) error {
	for i, v := range l {
		if v == All {
			if len(l) > 1 {
				return fmt.Errorf("%ss: * already means every %s; list it alone", kind, kind)
			}
			continue
		}
		ns, q := v, "q"
		if kind == "queue" {
			ns, q = coordinator.DefaultNamespace, v
		}
		if err := coordinator.DefaultLimits.CheckNames(ns, q, ""); err != nil {
			return fmt.Errorf("%s %q: %w", kind, v, err)
		}
		if slices.Contains(l[:i], v) {
			return fmt.Errorf("%s %q is listed twice", kind, v)
		}
	}
	return nil
}

// ReadFile reads and parses the token file at path.
func ReadFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// encode returns e's line, without its newline.
func (e *Entry) encode() []byte {
	l := line{Name: e.Name, Role: string(e.Role), Namespaces: e.Namespaces, Queues: e.Queues, ID: e.ID, SHA256: hex.EncodeToString(e.Hash[:])}
	if !e.Created.IsZero() {
		l.Created = e.Created.UTC().Format(time.RFC3339)
	}
	b, err := json.Marshal(l)
	if err != nil {
		panic(fmt.Sprintf("auth: encoding a token line: %v", err)) // strings and slices of strings always encode
	}
	return b
}

// Create makes a new token for p (created at now) and appends its entry
// to the token file at path, creating the file (mode 0600) if there is
// none. It refuses a p that is not valid or whose name the file already
// has, and a file that does not parse. It returns the token, which exists
// nowhere else: show it once.
func Create(path string, p Principal, now time.Time) (token string, e Entry, err error) {
	if err := p.Validate(); err != nil {
		return "", Entry{}, err
	}
	f, err := openLocked(path, os.O_RDWR|os.O_CREATE|os.O_APPEND)
	if err != nil {
		return "", Entry{}, err
	}
	defer f.Close()
	existing, err := io.ReadAll(f)
	if err != nil {
		return "", Entry{}, err
	}
	var add []byte
	t := &Tokens{byID: map[string]int{}}
	if len(bytes.TrimSpace(existing)) == 0 {
		add = fmt.Appendf(nil, "{\"format\":%q,\"version\":%d}\n", fileFormat, fileVersion)
	} else {
		if t, err = Parse(bytes.NewReader(existing), path); err != nil {
			return "", Entry{}, fmt.Errorf("%w; fix the file first, nothing was added", err)
		}
		if !bytes.HasSuffix(existing, []byte("\n")) {
			add = []byte("\n")
		}
	}
	if t.Named(p.Name) != nil {
		return "", Entry{}, fmt.Errorf("%s already has a token named %q: pick another name, or revoke that token first (tenure token revoke)", path, p.Name)
	}
	for {
		token, e.ID = NewToken()
		if t.lookup(e.ID) == nil {
			break
		}
	}
	e.Principal, e.Hash, e.Created = p, HashOf(token), now
	add = append(append(add, e.encode()...), '\n')
	if _, err := f.Write(add); err != nil {
		return "", Entry{}, err
	}
	if err := f.Sync(); err != nil {
		return "", Entry{}, err
	}
	return token, e, f.Close()
}

// Revoke removes the token named name from the token file at path,
// keeping every other line (comments included); the file is replaced
// atomically. It returns the entry removed.
func Revoke(path, name string) (Entry, error) {
	f, err := openLocked(path, os.O_RDONLY)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return Entry{}, err
	}
	t, err := Parse(bytes.NewReader(data), path)
	if err != nil {
		return Entry{}, fmt.Errorf("%w; fix the file first, nothing was revoked", err)
	}
	e := t.Named(name)
	if e == nil {
		return Entry{}, fmt.Errorf("%s has no token named %q (tenure token list shows the names)", path, name)
	}
	var out bytes.Buffer
	for l := range bytes.Lines(data) {
		if text := strings.TrimSpace(string(l)); text != "" && !strings.HasPrefix(text, "#") {
			if got, err := parseLine(text); err == nil && got.Name == name {
				continue
			}
		}
		out.Write(l)
	}
	st, err := f.Stat()
	if err != nil {
		return Entry{}, err
	}
	return *e, replaceFile(path, out.Bytes(), st.Mode().Perm())
}

// openLocked opens the token file at path (creating it with mode 0600 if
// flag says so) and takes an exclusive flock on it, so that a Create and a
// Revoke never interleave. Revoke replaces the file: a lock taken on the
// file it replaced is dropped and taken again on the new one.
func openLocked(path string, flag int) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err := cmp.Or(err1, err2); err != nil {
			f.Close()
			return nil, err
		}
		if os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
	}
}

// replaceFile writes data to path through a temporary file in its
// directory, fsynced and renamed over it.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
