package ring

import (
	"math/rand/v2"
	"testing"
)

// TestAgainstSlice drives a ring and a plain slice queue with the same
// random pushes and pops, across many wraps and growths, and checks that
// they always agree.
func TestAgainstSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r Ring[int]
	var want []int
	next := 0
	for step := range 200_000 {
		if rng.IntN(3) > 0 || len(want) == 0 { // grows on average
			r.Push(next)
			want = append(want, next)
			next++
		} else {
			got, ok := r.Pop()
			if !ok || got != want[0] {
				t.Fatalf("step %d: Pop = %d, %v; want %d", step, got, ok, want[0])
			}
			want = want[1:]
		}
		if r.Len() != len(want) {
			t.Fatalf("step %d: Len = %d, want %d", step, r.Len(), len(want))
		}
		if len(want) > 0 {
			i := rng.IntN(len(want))
			if *r.At(i) != want[i] {
				t.Fatalf("step %d: At(%d) = %d, want %d", step, i, *r.At(i), want[i])
			}
		}
		if step%50_000 == 0 { // drain now and then: wraps at every offset
			for len(want) > 0 {
				got, _ := r.Pop()
				if got != want[0] {
					t.Fatalf("drain: Pop = %d, want %d", got, want[0])
				}
				want = want[1:]
			}
		}
	}
}

func TestPopEmptyAndZeroing(t *testing.T) {
	var r Ring[*int]
	if _, ok := r.Pop(); ok {
		t.Fatal("Pop on an empty ring reported an element")
	}
	x := 1
	r.Push(&x)
	if v, ok := r.Pop(); !ok || v != &x {
		t.Fatal("Pop did not return the pushed pointer")
	}
	if r.buf[0] != nil {
		t.Fatal("a popped slot still references its element")
	}
}

func TestAtWritesInPlace(t *testing.T) {
	var r Ring[int]
	for i := range 20 {
		r.Push(i)
	}
	*r.At(5) = 500
	for i := range 20 {
		v, _ := r.Pop()
		if want := map[bool]int{true: 500, false: i}[i == 5]; v != want {
			t.Fatalf("element %d = %d, want %d", i, v, want)
		}
	}
}

func TestAtOutOfRangePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("At(Len()) did not panic")
		}
	}()
	var r Ring[int]
	r.Push(1)
	r.At(1)
}

func TestRelease(t *testing.T) {
	var r Ring[int]
	for i := range 1000 {
		r.Push(i)
	}
	r.Release()
	if r.Cap() == 0 || r.Len() != 1000 {
		t.Fatal("Release dropped the storage of a ring holding elements")
	}
	for range 1000 {
		r.Pop()
	}
	if r.Cap() < 1000 {
		t.Fatalf("an emptied ring has capacity %d before Release", r.Cap())
	}
	r.Release()
	if r.Cap() != 0 {
		t.Fatalf("Release kept %d slots", r.Cap())
	}
	r.Push(7)
	if v, ok := r.Pop(); !ok || v != 7 {
		t.Fatal("a released ring does not work again")
	}
}

func BenchmarkPushPop(b *testing.B) {
	var r Ring[int]
	for i := range b.N {
		r.Push(i)
		if r.Len() > 64 {
			r.Pop()
		}
	}
}
