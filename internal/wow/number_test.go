package wow

import (
	"strings"
	"testing"
)

// An exponent is read as far as the number's own digits could cancel it.
// parseInt stopped at 1,000,000, so 1 followed by a million zeros times
// 10^-10,000,000 (10^-9,000,000, not an integer) read as 1, and Decode gave
// such an event stream (about a megabyte, within Kafka's default record
// size) version 1. FuzzDecode's oracle calls exponents of more than 4
// digits indeterminate, so the fuzzer could not see it. Found by review.
func TestParseIntExponentCancelledByItsDigits(t *testing.T) {
	zeros := strings.Repeat("0", 1_000_000)
	for _, tt := range []struct{ num, want string }{
		{"1" + zeros + "e-10000000", "is not an integer"}, // 10^-9000000
	} {
		n, reason := parseInt([]byte(tt.num))
		if reason != tt.want {
			t.Errorf("parseInt(%s…e%s) = %d, %q; want %q", tt.num[:3], tt.num[strings.IndexByte(tt.num, 'e')+1:], n, reason, tt.want)
		}
	}
	v := `{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e"}],"version":1` + zeros + `e-10000000}`
	if m, err := Decode(KindEvent, []byte(v)); err == nil {
		t.Errorf("Decode accepts version 10^-9000000 as %d", m.Version)
	}
}
