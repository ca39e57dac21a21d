// Package handlers holds wowd's built-in handlers: http (the HTTP sink), log
// and discard. [Register] adds them to a registry; importing the package adds
// them to [handler.Default].
package handlers
