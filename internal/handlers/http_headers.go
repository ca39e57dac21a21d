package handlers

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

const (
	// fileCheckEvery is how often a header file is checked for a change.
	fileCheckEvery = time.Second
	// maxHeaderFile is the largest header file read.
	maxHeaderFile = 16 << 10
)

// staticHeaders returns the static headers of a sink, headers and
// headers-from-env read now, or why they cannot be. Errors name the header
// and its source, never its value (as fileHeaders' do).
func staticHeaders(cfg HTTPConfig) (http.Header, []error) {
	static := make(http.Header, len(cfg.Headers)+len(cfg.HeadersFromEnv))
	for k, v := range cfg.Headers {
		static.Set(k, strings.TrimSpace(v)) // as the values of files and variables are
	}
	errs := envHeaders(cfg, os.LookupEnv, static)
	return static, errs
}

// envHeaders sets the headers of headers-from-env in h from the variables
// lookup gives, and returns why those it cannot set cannot be.
func envHeaders(cfg HTTPConfig, lookup func(string) (string, bool), h http.Header) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(cfg.HeadersFromEnv)) {
		name := cfg.HeadersFromEnv[k]
		raw, ok := lookup(name)
		if !ok {
			errs = append(errs, fmt.Errorf("headers-from-env.%s: environment variable %s is not set", k, name))
			continue
		}
		v, err := headerValue(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("headers-from-env.%s: environment variable %s %w", k, name, err))
			continue
		}
		h.Set(k, v)
	}
	return errs
}

// CheckEnv reports the headers-from-env whose variables lookup does not
// give a usable value, as building the sink would: wowd config validate
// checks them where wowd will run, as it does the files. Each error is
// "headers-from-env.<header>: problem", naming the variable, never its
// value.
func (c *HTTPConfig) CheckEnv(lookup func(string) (string, bool)) []error {
	return envHeaders(*c, lookup, http.Header{})
}

// CheckFiles reports the headers-from-file whose files do not give a usable
// value, read as building the sink reads them: wowd config validate checks
// them where wowd will run, as it does the environment (CheckEnv). Each
// error is "headers-from-file.<header>: problem", naming the file, never
// its content.
func (c *HTTPConfig) CheckFiles() []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(c.HeadersFromFile)) {
		if _, _, err := readHeaderFile(c.HeadersFromFile[k]); err != nil {
			errs = append(errs, fmt.Errorf("headers-from-file.%s: %w", k, err))
		}
	}
	return errs
}

// fileHeaders returns headers-from-file, each file read once now, or why
// they cannot be; one that reuse reads already under the same header name
// is taken from it as it is (a reload: it keeps its value and its checks).
func fileHeaders(cfg HTTPConfig, log *zap.Logger, reuse []*fileHeader) ([]*fileHeader, []error) {
	var (
		files []*fileHeader
		errs  []error
	)
	for _, k := range slices.Sorted(maps.Keys(cfg.HeadersFromFile)) {
		name, path := http.CanonicalHeaderKey(k), cfg.HeadersFromFile[k]
		if i := slices.IndexFunc(reuse, func(f *fileHeader) bool { return f.name == name && f.path == path }); i >= 0 {
			files = append(files, reuse[i])
			continue
		}
		f := &fileHeader{name: name, path: path, every: fileCheckEvery, log: log}
		if err := f.load(time.Now()); err != nil {
			errs = append(errs, fmt.Errorf("headers-from-file.%s: %w", k, err))
			continue
		}
		files = append(files, f)
	}
	return files, errs
}

// headerValue trims raw and checks it can be sent as a header value. Its
// errors complete a sentence naming the source, and never quote the value.
func headerValue(raw string) (string, error) {
	v := strings.TrimSpace(raw)
	switch {
	case v == "":
		return "", errors.New("is empty")
	case !validHeaderValue(v):
		return "", errors.New("holds control characters")
	}
	return v, nil
}

// fileHeader is a request header whose value is read from a file, such as a
// token that is rotated. The file is read when the sink is built; after
// that, a request checks it at most once per every and reads it again when
// it changed (another file, modification time or size). A file that cannot
// be read, or holds no valid value, leaves the previous value in use, and
// is read again at every check until it can be used: a fix need not change
// what the check compares (a mode fixed by chmod, a value rewritten in
// place within the same second), and the warning is logged once per
// distinct error.
type fileHeader struct {
	name  string // canonical header name
	path  string
	every time.Duration
	log   *zap.Logger

	mu     sync.Mutex  // guards cur, info, next and failed
	cur    string      // the value in use
	info   os.FileInfo // of the file last read
	next   time.Time   // when to check the file again
	failed string      // why the file's last read could not be used; "": it could
}

// load reads the file, reporting why it cannot be used.
func (f *fileHeader) load(now time.Time) error {
	v, info, err := readHeaderFile(f.path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur, f.info, f.next = v, info, now.Add(f.every)
	return nil
}

// get returns the header value to send at now, reading the file again if
// it is time to check and it changed.
func (f *fileHeader) get(now time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Before(f.next) {
		return f.cur
	}
	f.next = now.Add(f.every)
	info, err := os.Stat(f.path)
	if err == nil && f.failed == "" && sameVersion(f.info, info) {
		return f.cur
	}
	v, read, err := readHeaderFile(f.path)
	if err != nil {
		if err.Error() != f.failed {
			f.failed = err.Error()
			f.log.Warn("header file changed but cannot be used; keeping the previous value",
				zap.String("header", f.name), zap.String("path", f.path), zap.Error(err))
		}
		return f.cur
	}
	f.cur, f.info, f.failed = v, read, ""
	f.log.Debug("header file read again", zap.String("header", f.name), zap.String("path", f.path))
	return f.cur
}

// sameVersion reports whether b describes the same version of a file as a.
func sameVersion(a, b os.FileInfo) bool {
	return a != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// readHeaderFile reads a header value from the file at path, trimmed.
func readHeaderFile(path string) (string, os.FileInfo, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return "", nil, err
	}
	b, err := io.ReadAll(io.LimitReader(file, maxHeaderFile+1))
	if err != nil {
		return "", nil, err
	}
	if len(b) > maxHeaderFile {
		return "", nil, fmt.Errorf("%s is larger than %d bytes", path, maxHeaderFile)
	}
	v, err := headerValue(string(b))
	if err != nil {
		return "", nil, fmt.Errorf("%s %w", path, err)
	}
	return v, info, nil
}
