package receiver

import "testing"

// BenchmarkTracker pushes records and completes them slightly out of order,
// as workers do.
func BenchmarkTracker(b *testing.B) {
	t := newTracker()
	var seqs [8]int64
	for i := range b.N {
		seqs[i%8] = t.push(int64(i), 0, nil)
		if i%8 == 7 {
			for _, k := range [8]int{1, 0, 3, 2, 5, 4, 7, 6} {
				t.complete(seqs[k])
			}
		}
	}
}
