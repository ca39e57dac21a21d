// Command wowd-audit is wowd with the audit handler compiled in: the same
// commands and configuration, plus `type: audit`.
package main

import (
	"os"

	"github.com/wowd/wowd/cli"

	_ "example.com/wowd-audit/audit" // registers the audit handler
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
