package handlertest

import (
	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// Decode decodes raw, a dispatcher's handler mapping without its `type` key,
// into a new configuration value of spec, exactly as wowd does when it reads
// its configuration: defaults first, unknown keys and wrong types refused,
// required fields checked, then the value's Validate if it is a
// handler.Validator. Every problem is reported, each naming its key. Plugin
// tests use it to check their configuration the way wowd will read it.
func Decode(spec handler.Spec, raw map[string]any) (any, error) {
	return handlerconfig.Decode(spec, raw)
}
