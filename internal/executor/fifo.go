package executor

// fifo is a growable ring buffer of mailboxes. It is not safe for concurrent
// use; its owner guards it.
type fifo struct {
	buf  []*mailbox
	head int
	n    int
}

func (f *fifo) len() int { return f.n }

func (f *fifo) push(mb *mailbox) {
	if f.n == len(f.buf) {
		f.grow()
	}
	f.buf[(f.head+f.n)&(len(f.buf)-1)] = mb
	f.n++
}

func (f *fifo) pop() *mailbox {
	if f.n == 0 {
		return nil
	}
	mb := f.buf[f.head]
	f.buf[f.head] = nil
	f.head = (f.head + 1) & (len(f.buf) - 1)
	f.n--
	return mb
}

func (f *fifo) grow() {
	size := 2 * len(f.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]*mailbox, size)
	for i := range f.n {
		buf[i] = f.buf[(f.head+i)&(len(f.buf)-1)]
	}
	f.buf, f.head = buf, 0
}
