package testwait

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		For(t, time.Minute, "a second to pass", func() bool { return time.Since(start) >= time.Second })
		if d := time.Since(start); d < time.Second || d > time.Second+2*poll {
			t.Fatalf("returned after %v, want about a second", d)
		}
	})
}

func TestNoErrorReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		NoError(t, time.Minute, time.Second, "three tries", func() error {
			if n++; n < 3 {
				return errors.New("not yet")
			}
			return nil
		})
		if n != 3 {
			t.Fatalf("%d tries", n)
		}
	})
}

// The failure paths call t.Fatalf; a fake TB records it without ending the
// test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestTimeoutsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for name, wait := range map[string]func(testing.TB){
			"For":     func(tb testing.TB) { For(tb, time.Second, "never", func() bool { return false }) },
			"NoError": func(tb testing.TB) { NoError(tb, time.Second, 0, "never", func() error { return errors.New("no") }) },
		} {
			f := &fakeTB{TB: t}
			func() {
				defer func() {
					if r := recover(); r != f {
						panic(r)
					}
				}()
				wait(f)
			}()
			if f.failed == "" {
				t.Errorf("%s did not fail after its time limit", name)
			}
		}
	})
}
