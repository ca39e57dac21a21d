package memory

import "testing"

// Found by review of ff66944, which gave every topic its own moving average of the decompression
// ratio, each starting at InitialRatio (16) and moving down by a sixteenth
// of the gap per batch, and sized fetches by the highest. A topic the
// client had read only a few batches of kept close to 16 for a long time
// whatever its batches said: here every batch the client ever read was
// uncompressed (1×), yet the fetch limit stays at about a fifteenth of the
// client's part, because a rarely written topic (two batches) still counts
// as compressing 14×. With the one average shared by all topics (before
// the change), 400 uncompressed batches had brought it to 1× and the
// limit to the part. Nothing the client read compresses better than 1×:
// the limit must be about the part.
func TestARarelyReadTopicDoesNotKeepFetchesSmall(t *testing.T) {
	b, err := New(32<<20, 10) // a part of 3.3 MB
	if err != nil {
		t.Fatal(err)
	}
	f := b.Join()
	f.Configure(16<<20, 16<<20) // the configured limits do not bound it here
	for i := range 400 {
		batchOf(f, "commands", 1000, 1000) // uncompressed, steady
		if i%200 == 0 {
			batchOf(f, "events", 1000, 1000) // uncompressed too, rare
		}
	}
	got, _ := f.Limits(1, 0)
	t.Logf("ratio %.2f, fetch limit %d, part %d", f.Ratio(), got, f.Part())
	if int64(got) < f.Part()/2 {
		t.Fatalf("every batch read was 1× (402 batches of two topics), yet fetches are sized for %.1f× compression: limit %d bytes, %.0f%% of the client's part %d (the rare topic's average still near InitialRatio)",
			f.Ratio(), got, 100*float64(got)/float64(f.Part()), f.Part())
	}
}
