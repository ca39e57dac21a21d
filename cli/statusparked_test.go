package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/admin"
)

// docs/operations.md, Operator's view: `wowd status` shows "the same as
// tables in a terminal", and `head_past_failure` is shown as "head past
// the failed message" on the page, "as in `wowd parked list`": the class
// and reason are then the failed message's, no longer the head's, and a
// skip dead-letters nothing. `wowd status` prints the old class and reason
// as the aggregate's "WHY" without saying so, so the operator reads the
// head as the message that failed (and expects a skip to dead-letter it).
// Found by review.
func TestStatusMarksAParkedHeadPastTheFailure(t *testing.T) {
	st := sampleStatus(0)
	st.Parked = admin.ParkedStatus{Available: true, Aggregates: []admin.ParkedAggregate{{
		Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: "cart-7",
		Topic: "wow.shop.cart.event", Partition: 0, Offset: 300, Class: "permanent", Reason: "sink rejects cart-7",
		Attempts: 1, Since: time.Now().Add(-time.Minute), HeadPastFailure: true, Owned: true,
	}}}
	var out bytes.Buffer
	if err := writeStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "head past the failed message") {
		t.Errorf("wowd status shows a parked aggregate whose head is past the failed message as:\n%s\nwithout saying so (the page and wowd parked list say \"head past the failed message: ...\")", out.String())
	}
}
