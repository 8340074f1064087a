// Package descriptor holds the fabro contracts' file descriptors with
// their source information (the comments of every service, method,
// message and field), which the generated Go code leaves out. Servers
// answer reflection from it, so grpcurl describe and buf curl show the
// documentation.
package descriptor

import (
	_ "embed"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// image is `buf build` of proto/ (make generate): a FileDescriptorSet on
// the wire, imports and source information included.
//
//go:embed fabro.binpb
var image []byte

var files = sync.OnceValues(func() (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(image, &set); err != nil {
		return nil, fmt.Errorf("descriptor: decode the embedded image: %w", err)
	}
	f, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("descriptor: the embedded image: %w", err)
	}
	return f, nil
})

// Files returns the contracts' files, with their comments.
func Files() (*protoregistry.Files, error) { return files() }
