package server

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/fabro-sh/fabro-go/gen/descriptor"
	"github.com/fabro-sh/fabro-go/platform/auth"
)

// registerReflection serves server reflection from the contracts' files
// with their comments (gen/descriptor), so grpcurl describe and buf curl
// show the documentation; what they lack (health, reflection itself) comes
// from the files linked into the binary.
func registerReflection(s *grpc.Server, logger *slog.Logger) {
	var r protodesc.Resolver = protoregistry.GlobalFiles
	if files, err := descriptor.Files(); err != nil {
		logger.Warn("server reflection answers without comments", "error", err)
	} else {
		r = layered{files, protoregistry.GlobalFiles}
	}
	full := reflection.ServerOptions{Services: s, DescriptorResolver: r}
	// A caller with no credential is described the health service alone.
	health := reflection.ServerOptions{Services: healthOnly{s}, DescriptorResolver: healthFiles{r}, ExtensionResolver: new(protoregistry.Types)}
	reflectionv1.RegisterServerReflectionServer(s, byCaller{reflection.NewServerV1(full), reflection.NewServerV1(health)})
	reflectionv1alpha.RegisterServerReflectionServer(s, byCallerAlpha{reflection.NewServer(full), reflection.NewServer(health)})
}

// byCaller answers reflection in full, or of health alone for a caller
// authentication let in without a credential.
type byCaller struct {
	full, health reflectionv1.ServerReflectionServer
}

func (b byCaller) ServerReflectionInfo(stream reflectionv1.ServerReflection_ServerReflectionInfoServer) error {
	if auth.HealthOnlyReflection(stream.Context()) {
		return b.health.ServerReflectionInfo(stream)
	}
	return b.full.ServerReflectionInfo(stream)
}

type byCallerAlpha struct {
	full, health reflectionv1alpha.ServerReflectionServer
}

func (b byCallerAlpha) ServerReflectionInfo(stream reflectionv1alpha.ServerReflection_ServerReflectionInfoServer) error {
	if auth.HealthOnlyReflection(stream.Context()) {
		return b.health.ServerReflectionInfo(stream)
	}
	return b.full.ServerReflectionInfo(stream)
}

// healthService is the one service an anonymous caller may see described.
const healthService = "grpc.health.v1.Health"

// healthOnly lists the health service alone.
type healthOnly struct{ s *grpc.Server }

func (h healthOnly) GetServiceInfo() map[string]grpc.ServiceInfo {
	info := h.s.GetServiceInfo()
	return map[string]grpc.ServiceInfo{healthService: info[healthService]}
}

// healthFiles resolves the health service's file and what it imports,
// nothing else.
type healthFiles struct{ r protodesc.Resolver }

func (h healthFiles) allowed(f protoreflect.FileDescriptor) bool {
	return f.Package() == "grpc.health.v1" || f.Package() == "google.protobuf"
}

func (h healthFiles) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	f, err := h.r.FindFileByPath(path)
	if err != nil || !h.allowed(f) {
		return nil, protoregistry.NotFound
	}
	return f, nil
}

func (h healthFiles) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	d, err := h.r.FindDescriptorByName(name)
	if err != nil || !h.allowed(d.ParentFile()) {
		return nil, protoregistry.NotFound
	}
	return d, nil
}

// layered resolves from first, then from second.
type layered [2]protodesc.Resolver

func (l layered) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if f, err := l[0].FindFileByPath(path); err == nil {
		return f, nil
	}
	return l[1].FindFileByPath(path)
}

func (l layered) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := l[0].FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return l[1].FindDescriptorByName(name)
}
