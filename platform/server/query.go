package server

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery is the gateway's query parameter parser: a parameter that
// names no field, or an enum value that names no value, is an error naming
// it (as protojson's are for bodies), instead of being dropped.
type strictQuery struct{ runtime.DefaultQueryParser }

var mapKeyRE = regexp.MustCompile(`^(.*)\[(.*)\]$`)

func (q strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	for key, vals := range values {
		name := key
		if m := mapKeyRE.FindStringSubmatch(key); m != nil {
			name = m[1]
		}
		fd := resolveField(msg.ProtoReflect().Descriptor(), strings.Split(name, "."))
		if fd == nil {
			return fmt.Errorf("unknown field %q", key)
		}
		if fd.Kind() == protoreflect.EnumKind && !fd.IsMap() {
			for _, v := range vals {
				if fd.Enum().Values().ByName(protoreflect.Name(v)) != nil {
					continue
				}
				if n, err := strconv.ParseInt(v, 10, 32); err == nil && fd.Enum().Values().ByNumber(protoreflect.EnumNumber(n)) != nil {
					continue
				}
				return fmt.Errorf("invalid value for enum field %s: %q", key, v)
			}
		}
	}
	return q.DefaultQueryParser.Parse(msg, values, filter)
}

// resolveField follows a dotted path of proto or JSON names through
// singular message fields.
func resolveField(md protoreflect.MessageDescriptor, path []string) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for i, p := range path {
		if fd = md.Fields().ByTextName(p); fd == nil {
			if fd = md.Fields().ByJSONName(p); fd == nil {
				return nil
			}
		}
		if i < len(path)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return nil
			}
			md = fd.Message()
		}
	}
	return fd
}
