// Command wowd dispatches Kafka messages of Wow services to handlers, in
// order per aggregate. See the README.
package main

import (
	"os"

	"github.com/wowd/wowd/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
