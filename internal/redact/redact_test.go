package redact

import "testing"

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://sink:pw@sink.example:8443/wow?x=1":      "https://sink:xxxxx@sink.example:8443/wow?x=******",
		"https://sink.example/hook?token=t0k&env=p&flag": "https://sink.example/hook?token=******&env=******&******",
		"https://t0ken@sink.example/plain":               "https://xxxxx@sink.example/plain", // a user name alone is often a token
		"https://sink.example/hook?s3cr3t":               "https://sink.example/hook?******", // so is a bare parameter
		"http://127.0.0.1:8080/events":                   "http://127.0.0.1:8080/events",
		"/etc/wow/metadata.json":                         "/etc/wow/metadata.json",
		"not a url ?token=x":                             "not a url ?token=x",
		"https://sink.example/p?a=%2F%3D&b=c#frag":       "https://sink.example/p?a=******&b=******#frag",
		"https://u:p@sink.example":                       "https://u:xxxxx@sink.example",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
