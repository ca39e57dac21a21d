package bearer

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func request(auth string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return req
}

func TestTokenFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("  t0ken-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	tok, err := Open(file, "test", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for auth, want := range map[string]bool{
		"Bearer t0ken-one": true, "bearer t0ken-one": true, "Bearer  t0ken-one ": true,
		"": false, "Bearer": false, "Bearer ": false, "Bearer t0ken-on": false, "Bearer t0ken-one1": false,
		"Basic t0ken-one": false, "t0ken-one": false, "Bearer T0KEN-ONE": false,
	} {
		if got := tok.allows(request(auth), now); got != want {
			t.Errorf("%q: allowed %v, want %v", auth, got, want)
		}
	}

	// Rotated: seen at the next look, not before.
	if err := os.WriteFile(file, []byte("t0ken-two-longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !tok.allows(request("Bearer t0ken-one"), now.Add(500*time.Millisecond)) {
		t.Error("the file was looked at again within a second")
	}
	later := now.Add(2 * time.Second)
	if tok.allows(request("Bearer t0ken-one"), later) || !tok.allows(request("Bearer t0ken-two-longer"), later) {
		t.Error("the rotated token is not the one in use")
	}

	// Emptied or removed: the previous token stays.
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	later = later.Add(2 * time.Second)
	if !tok.allows(request("Bearer t0ken-two-longer"), later) {
		t.Error("an emptied file dropped the token in use")
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	later = later.Add(2 * time.Second)
	if !tok.allows(request("Bearer t0ken-two-longer"), later) {
		t.Error("a removed file dropped the token in use")
	}
	if logs.FilterMessageSnippet("cannot be used").Len() != 1 {
		t.Errorf("want one warning for the emptied file, got %v", logs.All())
	}
	for _, e := range logs.All() {
		if line := e.Message + " " + strings.Join(fields(e), " "); strings.Contains(line, "t0ken") {
			t.Errorf("a log line holds the token: %s", line)
		}
	}
}

func fields(e observer.LoggedEntry) []string {
	var out []string
	for k, v := range e.ContextMap() {
		out = append(out, k, strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(toString(v), "\n", " "), "\t", " ")))
	}
	return out
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"empty": "", "blank": " \n\t", "two": "a b", "huge": strings.Repeat("x", maxTokenFile+1)} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(file, "test", nil); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing"), "test", nil); err == nil {
		t.Error("missing: opened")
	}
}

// TestATokenFixedInPlaceIsReadAgain: a token file whose new version could
// not be used (here two words, an editor's slip) is read again at each
// look until it can, so a fix that leaves its size and modification time
// as they were (written in place within the same second; a mode fixed by
// chmod) is taken up: the rotated token is accepted and the old one
// refused. Before, the failed version was remembered as tried and the fix
// never read: the new token was answered 401 and the old one, meant to be
// revoked, kept working until a restart. The warning is logged once.
func TestATokenFixedInPlaceIsReadAgain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	write := func(v string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(v), 0o600); err != nil { // in place: the same file
			t.Fatal(err)
		}
		if err := os.Chtimes(file, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("t0ken-one")
	core, logs := observer.New(zapcore.WarnLevel)
	tok, err := Open(file, "test", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	mtime = mtime.Add(time.Second)
	write("t0ken two") // the same size
	for i := 1; i <= 3; i++ {
		if !tok.allows(request("Bearer t0ken-one"), now.Add(time.Duration(i)*2*time.Second)) {
			t.Fatal("an unusable version dropped the token in use")
		}
	}
	write("t0ken-two") // the fix: same size, same modification time
	later := now.Add(10 * time.Second)
	if !tok.allows(request("Bearer t0ken-two"), later) {
		t.Error("the fixed token is refused")
	}
	if tok.allows(request("Bearer t0ken-one"), later.Add(2*time.Second)) {
		t.Error("the rotated-out token is still accepted")
	}
	if n := logs.FilterMessageSnippet("cannot be used").Len(); n != 1 {
		t.Errorf("want one warning for the unusable version, got %d: %v", n, logs.All())
	}
}
