package handler

// Validator is implemented by configuration values that check themselves
// after decoding (cross-field rules, ranges).
type Validator interface {
	Validate() error
}
