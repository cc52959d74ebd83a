module skiff.test/http2conformance

go 1.22

require (
	github.com/spf13/cobra v1.8.0
	github.com/summerwind/h2spec v2.2.1+incompatible
)

require (
	github.com/fatih/color v1.16.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	golang.org/x/net v0.25.0 // indirect
	golang.org/x/sys v0.20.0 // indirect
	golang.org/x/text v0.15.0 // indirect
)
