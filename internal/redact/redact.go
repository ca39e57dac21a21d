// Package redact takes the credentials out of what wowd prints and logs.
package redact

import (
	"net/url"
	"strings"
)

// Mask is what a secret's value is shown as.
const Mask = "******"

// URL returns s, when it is an absolute URL, with the password of its user
// information replaced by xxxxx (a user name without a password too: it
// is often a token, https://TOKEN@host) and the value of each parameter of
// its query by Mask (a parameter without a value too: it may be a key): a
// credential written into a URL (http://user:password@host,
// …/hook?token=…) is a secret like any other, and which query parameters
// are credentials only the endpoint knows, so every value is masked and
// the names of those with a value stay. Anything else is returned as it
// is.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return s
	}
	changed := false
	if _, ok := u.User.Password(); ok { // nil User: none
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
		changed = true
	} else if u.User != nil && u.User.Username() != "" {
		u.User = url.User("xxxxx")
		changed = true
	}
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		for i, p := range params {
			if name, _, ok := strings.Cut(p, "="); ok {
				params[i] = name + "=" + Mask
			} else if p != "" {
				params[i] = Mask
			}
		}
		u.RawQuery = strings.Join(params, "&")
		changed = true
	}
	if !changed {
		return s
	}
	return u.String()
}
