package handlers

// callQueue is an unbounded FIFO of calls: a ring buffer that grows as
// needed. It is not safe for concurrent use.
type callQueue struct {
	buf  []*call
	head int // index of the oldest call
	n    int // number of calls
}

func (q *callQueue) len() int { return q.n }

func (q *callQueue) push(c *call) {
	if q.n == len(q.buf) {
		buf := make([]*call, max(16, 2*len(q.buf)))
		k := copy(buf, q.buf[q.head:])
		copy(buf[k:], q.buf[:q.head])
		q.buf, q.head = buf, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = c
	q.n++
}

// pop removes and returns the oldest call, or nil when the queue is empty.
func (q *callQueue) pop() *call {
	if q.n == 0 {
		return nil
	}
	c := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if q.n == 0 && len(q.buf) > 1024 {
		q.buf, q.head = nil, 0 // give a burst's memory back
	}
	return c
}
