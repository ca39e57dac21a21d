// Package configs holds example configurations; the one `wowd dev` uses by
// default is compiled in.
package configs

import _ "embed"

// Dev is configs/dev.yaml, the default configuration of `wowd dev`.
//
//go:embed dev.yaml
var Dev []byte
