package devbroker

import "testing"

// Start refuses a partition count out of range. It converted it to int32
// unchecked: 1<<32+1 wrapped to 1 for the topics while auto-created ones
// (dead-letter topics) would get 4294967297, and 1<<31 wrapped negative,
// which kfake replaced by its default, 2^31 partitions: a start that never
// returned. Found by review.
func TestStartPartitionsOutOfRange(t *testing.T) {
	b, err := Start("127.0.0.1:0", 1<<32+1, []string{"wow.example.cart.event"})
	if err == nil {
		b.Close()
		t.Fatalf("Start with %d partitions: no error", 1<<32+1)
	}
}
