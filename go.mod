module github.com/cudapatch/cudapatch

go 1.26

require (
	github.com/bmatcuk/doublestar/v4 v4.9.1
	github.com/rogpeppe/go-internal v1.16.0
	github.com/stretchr/testify v1.11.1
	github.com/urfave/cli/v3 v3.6.1
	github.com/vbauerster/mpb/v8 v8.11.2
	golang.org/x/term v0.37.0
)

require (
	github.com/VividCortex/ewma v1.2.0 // indirect
	github.com/acarl005/stripansi v0.0.0-20180116102854-5a71ef0e047d // indirect
	github.com/clipperhouse/stringish v0.1.1 // indirect
	github.com/clipperhouse/uax29/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/mattn/go-runewidth v0.0.19 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	golang.org/x/tools v0.32.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
