// Package ring is a growable ring buffer: a FIFO queue whose storage is
// reused as elements come and go, so a queue in a steady state allocates
// nothing. It backs the executor's spill queues, the receiver's offset
// trackers and the HTTP sink's call queue.
package ring

// Ring is a FIFO of T. The zero value is an empty ring ready to use. It is
// not safe for concurrent use: its owner guards it.
//
// The capacity is a power of two, so an index wraps with a mask, and it
// doubles when full. A Ring is three words, so that it fits where the
// owner lays out its cache lines.
type Ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int // elements held
}

// minCap is the capacity of a ring's first storage.
const minCap = 16

// Len returns the number of elements held.
func (r *Ring[T]) Len() int { return r.n }

// Push appends v.
func (r *Ring[T]) Push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// Pop removes and returns the oldest element; ok is false when the ring is
// empty. The slot is zeroed, so the ring keeps no reference to v.
func (r *Ring[T]) Pop() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	v = r.buf[r.head]
	var zero T
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v, true
}

// Cap returns the number of elements the ring holds before it grows.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Release drops the storage of an empty ring, so that a burst does not hold
// memory forever; the next Push allocates again. It does nothing to a ring
// that holds elements.
func (r *Ring[T]) Release() {
	if r.n == 0 {
		r.buf, r.head = nil, 0
	}
}

// At returns a pointer to the i-th oldest element (0 is the oldest), valid
// until the next Push or Pop. It panics unless 0 <= i < Len.
func (r *Ring[T]) At(i int) *T {
	if i < 0 || i >= r.n {
		panic("ring: index out of range")
	}
	return &r.buf[(r.head+i)&(len(r.buf)-1)]
}

func (r *Ring[T]) grow() {
	size := max(minCap, 2*len(r.buf))
	buf := make([]T, size)
	if r.n > 0 {
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:r.head])
	}
	r.buf, r.head = buf, 0
}
