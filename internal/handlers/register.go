package handlers

import "github.com/wowd/wowd/handler"

// Register adds the built-in handlers to r.
func Register(r *handler.Registry) {
	r.Register(discardSpec())
	r.Register(logSpec())
	r.Register(httpSpec())
}
