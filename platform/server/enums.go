package server

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// An open (proto3) enum field decodes any number: 99 arrives as 99 and the
// handler would treat it as whatever its switch defaults to. unknownEnums
// walks a request and refuses every enum value its enum does not define,
// through singular, repeated, map and nested fields. The walk visits only
// fields that are or can lead to an enum (a per-type plan, built once), so a
// request type without enums costs one map lookup.

// enumPlan lists the fields of one message type worth visiting: fields
// outside a oneof, and the oneofs with a member worth visiting (one
// WhichOneof instead of a Has per member).
type enumPlan struct {
	fields []protoreflect.FieldDescriptor
	oneofs []protoreflect.OneofDescriptor
	visit  []bool      // by field index: the field is or can lead to an enum
	child  []*enumPlan // by field index: the plan of a visited message field's type
}

var (
	enumPlans    sync.Map // protoreflect.MessageDescriptor → *enumPlan, complete
	enumPlanning sync.Mutex
)

// planFor returns md's plan, building it and the plans below it once.
// Plans are published complete: a cycle is closed inside the build, under
// the lock, never seen half-built by a request.
func planFor(md protoreflect.MessageDescriptor) *enumPlan {
	if p, ok := enumPlans.Load(md); ok {
		return p.(*enumPlan)
	}
	enumPlanning.Lock()
	defer enumPlanning.Unlock()
	if p, ok := enumPlans.Load(md); ok {
		return p.(*enumPlan)
	}
	built := map[protoreflect.MessageDescriptor]*enumPlan{}
	p := buildPlan(md, built)
	for d, bp := range built {
		enumPlans.Store(d, bp)
	}
	return p
}

func buildPlan(md protoreflect.MessageDescriptor, built map[protoreflect.MessageDescriptor]*enumPlan) *enumPlan {
	if p, ok := built[md]; ok {
		return p
	}
	if p, ok := enumPlans.Load(md); ok {
		return p.(*enumPlan)
	}
	fields := md.Fields()
	p := &enumPlan{visit: make([]bool, fields.Len()), child: make([]*enumPlan, fields.Len())}
	built[md] = p
	seenOneof := map[protoreflect.FullName]bool{}
	for i := range fields.Len() {
		fd := fields.Get(i)
		vd := fd
		if fd.IsMap() {
			vd = fd.MapValue()
		}
		switch vd.Kind() {
		case protoreflect.EnumKind:
			p.visit[i] = true
		case protoreflect.MessageKind, protoreflect.GroupKind:
			p.visit[i] = reachesEnum(vd.Message())
		}
		if !p.visit[i] {
			continue
		}
		if vd.Kind() != protoreflect.EnumKind {
			p.child[i] = buildPlan(vd.Message(), built)
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if !seenOneof[od.FullName()] {
				seenOneof[od.FullName()] = true
				p.oneofs = append(p.oneofs, od)
			}
			continue
		}
		p.fields = append(p.fields, fd)
	}
	return p
}

// reachesEnum reports whether a message of type md can hold an enum field,
// itself or in any message below it (cycles included).
func reachesEnum(md protoreflect.MessageDescriptor) bool {
	seen := map[protoreflect.FullName]bool{md.FullName(): true}
	queue := []protoreflect.MessageDescriptor{md}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		fields := m.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			switch fd.Kind() {
			case protoreflect.EnumKind:
				return true
			case protoreflect.MessageKind, protoreflect.GroupKind:
				if next := fd.Message(); !seen[next.FullName()] {
					seen[next.FullName()] = true
					queue = append(queue, next)
				}
			}
		}
	}
	return false
}

type enumViolation struct{ field, desc string }

// unknownEnums returns INVALID_ARGUMENT naming every enum field of m that
// holds an undefined number, or nil.
func unknownEnums(m protoreflect.Message) error {
	if !hasUnknownEnum(m) {
		return nil
	}
	bad := walkEnums(m, nil, nil)
	opts := []grpcerr.Option{grpcerr.Meta("message", string(m.Descriptor().FullName()), "field", bad[0].field)}
	for _, v := range bad {
		opts = append(opts, grpcerr.Field(v.field, v.desc))
	}
	msg := bad[0].field + ": " + bad[0].desc
	if len(bad) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(bad)-1)
	}
	return Domain.New(codes.InvalidArgument, ReasonUnknownEnumValue, msg, opts...)
}

// hasUnknownEnum is the walk without paths: what every request pays.
func hasUnknownEnum(m protoreflect.Message) bool {
	return unknownIn(m, planFor(m.Descriptor()))
}

func unknownIn(m protoreflect.Message, p *enumPlan) bool {
	for _, od := range p.oneofs {
		if fd := m.WhichOneof(od); fd != nil && p.visit[fd.Index()] && unknownValue(fd, m.Get(fd), p.child[fd.Index()]) {
			return true
		}
	}
	for _, fd := range p.fields {
		if !m.Has(fd) {
			continue
		}
		v, child := m.Get(fd), p.child[fd.Index()]
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if unknownValue(fd, l.Get(i), child) {
					return true
				}
			}
		case fd.IsMap():
			vd, found := fd.MapValue(), false
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownValue(vd, mv, child)
				return !found
			})
			if found {
				return true
			}
		default:
			if unknownValue(fd, v, child) {
				return true
			}
		}
	}
	return false
}

// unknownValue checks one value of fd (the map value's descriptor for a
// map); child is the plan of a message value's type.
func unknownValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, child *enumPlan) bool {
	if fd.Kind() != protoreflect.EnumKind {
		return unknownIn(v.Message(), child)
	}
	return fd.Enum().Values().ByNumber(v.Enum()) == nil
}

// pathNode is one step of the path to the field being visited: the path is
// spelled out only for a violation.
type pathNode struct {
	up    *pathNode
	field protoreflect.FieldDescriptor
	index int                 // list index, or -1
	key   protoreflect.MapKey // map key, when field is a map
}

func (p *pathNode) String() string {
	if p == nil {
		return ""
	}
	s := string(p.field.Name())
	if p.up != nil {
		s = p.up.String() + "." + s
	}
	switch {
	case p.field.IsMap():
		s += "[" + strconv.Quote(p.key.String()) + "]"
	case p.index >= 0:
		s += "[" + strconv.Itoa(p.index) + "]"
	}
	return s
}

func walkEnums(m protoreflect.Message, up *pathNode, bad []enumViolation) []enumViolation {
	p := planFor(m.Descriptor())
	fields := p.fields
	for _, od := range p.oneofs {
		if fd := m.WhichOneof(od); fd != nil && p.visit[fd.Index()] {
			fields = append(fields[:len(fields):len(fields)], fd)
		}
	}
	for _, fd := range fields {
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				bad = checkEnumValue(fd, l.Get(i), &pathNode{up: up, field: fd, index: i}, bad)
			}
		case fd.IsMap():
			vd := fd.MapValue()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				bad = checkEnumValue(vd, mv, &pathNode{up: up, field: fd, index: -1, key: k}, bad)
				return true
			})
		default:
			bad = checkEnumValue(fd, v, &pathNode{up: up, field: fd, index: -1}, bad)
		}
	}
	return bad
}

// checkEnumValue checks one value of field fd (the map value's descriptor
// for a map) at path at.
func checkEnumValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, at *pathNode, bad []enumViolation) []enumViolation {
	if fd.Kind() != protoreflect.EnumKind {
		return walkEnums(v.Message(), at, bad)
	}
	ed := fd.Enum()
	if ed.Values().ByNumber(v.Enum()) != nil {
		return bad
	}
	return append(bad, enumViolation{at.String(), fmt.Sprintf("%d is not a value of %s (%s)", v.Enum(), ed.FullName(), enumNames(ed))})
}

// enumNames lists an enum's value names, for the error message.
func enumNames(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	names := make([]string, vals.Len())
	for i := range vals.Len() {
		names[i] = string(vals.Get(i).Name())
	}
	return strings.Join(names, ", ")
}
