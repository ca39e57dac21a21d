// Package ack holds the machinery behind handler.Ack: how an
// acknowledgement reaches the code that made the Ack. It is internal so
// that the SDK shows plugin authors only what they call (handler.Ack and
// handler.AckFunc); wowd's receiver and the SDK's own wrappers build Acks
// here.
package ack

// Ack reports the outcome of one message; handler.Ack is this type, and
// its documentation is the contract.
type Ack struct {
	c     Completer
	token uint64
}

// Completer receives the outcome behind an Ack, with the token the Ack was
// made with, so that the completer can tell its Acks apart (one per try).
type Completer interface {
	Complete(token uint64, err error)
}

// New returns an Ack that reports to c with token. It allocates nothing.
func New(c Completer, token uint64) Ack { return Ack{c: c, token: token} }

// Done reports the outcome of the message.
func (a Ack) Done(err error) {
	if a.c != nil {
		a.c.Complete(a.token, err)
	}
}
