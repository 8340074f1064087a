module github.com/fabro-sh/fabro-go/examples/sandbox-plugin

go 1.26.8

require (
	github.com/fabro-sh/fabro-go/sdk v0.0.0
	github.com/fabro-sh/fabro-go/services/sandbox v0.0.0
)

require (
	github.com/fabro-sh/fabro-go/gen v0.0.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/hashicorp/go-plugin v1.8.0 // indirect
	github.com/hashicorp/yamux v0.1.2 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/oklog/run v1.1.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Inside the fabro-go repository the modules are used from their
// directories; a third party drops these lines and requires released
// versions.
replace (
	github.com/fabro-sh/fabro-go/gen => ../../gen
	github.com/fabro-sh/fabro-go/platform => ../../platform
	github.com/fabro-sh/fabro-go/sdk => ../../sdk
	github.com/fabro-sh/fabro-go/services/sandbox => ../../services/sandbox
)
