//go:build tools

// Package tools pins h2spec, the HTTP/2 conformance suite the tests run against the
// broker's server, and what its command needs (go build .../h2spec/cmd/h2spec).
package tools

import (
	_ "github.com/spf13/cobra"
	_ "github.com/summerwind/h2spec"
)
