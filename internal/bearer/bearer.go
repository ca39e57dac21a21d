// Package bearer checks HTTP requests for a bearer token read from a file
// (wow.ingest.token-file, wow.admin.token-file), and reads the file again
// when it changes, so a token can be rotated without a restart.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// maxTokenFile bounds a token file.
const maxTokenFile = 4096

// tokenCheckEvery is how often, at most, a request looks whether the token
// file changed.
const tokenCheckEvery = time.Second

// File is the bearer token that requests must carry, read from a file. The file is read when it is opened; after
// that a request looks at it at most once a second and reads it again when
// it changed (another file, modification time or size), so a token can be
// rotated by replacing the file, as Kubernetes does with a Secret volume. A
// changed file that cannot be read, or is empty, leaves the previous token
// in use, and is read again at every look until it can be used: a fix need
// not change what the look compares (a mode fixed by chmod, a token
// rewritten in place within the same second), and the warning is logged
// once per distinct error. The token is never logged.
type File struct {
	path  string
	what  string // whose token, for the log: "ingest", "admin"
	every time.Duration
	log   *zap.Logger

	mu     sync.Mutex
	sum    [sha256.Size]byte // of the token in use
	info   os.FileInfo       // of the file last read
	next   time.Time         // when to look at the file again
	failed string            // why the file's last read could not be used; "": it could
}

// Open reads the token file at path; what names whose token it is in the
// log ("ingest", "admin"). An empty or unreadable file is an error: the
// configuration is wrong.
func Open(path, what string, log *zap.Logger) (*File, error) {
	if log == nil {
		log = zap.NewNop()
	}
	t := &File{path: path, what: what, every: tokenCheckEvery, log: log}
	sum, info, err := readToken(path)
	if err != nil {
		return nil, err
	}
	t.sum, t.info, t.next = sum, info, time.Now().Add(t.every)
	return t, nil
}

// current returns the digest of the token in use at now, reading the file
// again if it is time to look and it changed.
func (t *File) current(now time.Time) [sha256.Size]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.next) {
		return t.sum
	}
	t.next = now.Add(t.every)
	info, err := os.Stat(t.path)
	if err != nil || t.failed == "" && sameVersion(t.info, info) {
		return t.sum
	}
	sum, read, err := readToken(t.path)
	if err != nil {
		if err.Error() != t.failed {
			t.failed = err.Error()
			t.log.Warn(t.what+" token file changed but cannot be used; keeping the previous token",
				zap.String("path", t.path), zap.Error(err))
		}
		return t.sum
	}
	t.sum, t.info, t.failed = sum, read, ""
	t.log.Info(t.what+" token file read again", zap.String("path", t.path))
	return t.sum
}

// Allows reports whether req carries the token: Authorization: Bearer
// <token>, compared in constant time (of digests, so not even the token's
// length shows).
func (t *File) Allows(req *http.Request) bool {
	return t.allows(req, time.Now())
}

func (t *File) allows(req *http.Request, now time.Time) bool {
	want := t.current(now)
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// sameVersion reports whether b describes the same version of a file as a.
func sameVersion(a, b os.FileInfo) bool {
	return a != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// readToken reads a token from the file at path, trimmed, and returns its
// digest. Its errors never quote the file's content.
func readToken(path string) ([sha256.Size]byte, os.FileInfo, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return sum, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return sum, nil, err
	}
	if len(b) > maxTokenFile {
		return sum, nil, fmt.Errorf("%s is larger than %d bytes", path, maxTokenFile)
	}
	tok, err := Token(b)
	if err != nil {
		return sum, nil, fmt.Errorf("%s %w", path, err)
	}
	return sha256.Sum256([]byte(tok)), info, nil
}

// Token returns the token a token file's content b holds: b without
// surrounding white space, which must be one word. Its errors complete a
// sentence that starts with the file's name; they never quote b. The
// configuration check (wowd config validate) uses it too, so that a file
// it passes is not refused at start.
func Token(b []byte) (string, error) {
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", errors.New("is empty")
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return "", errors.New("holds more than one token (white space or control characters inside)")
	}
	return tok, nil
}
