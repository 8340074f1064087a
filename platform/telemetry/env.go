package telemetry

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL this package speaks.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// settings is what the OTEL_* environment says, validated. The rule for a
// value that does not parse is one: Setup fails with an error naming the
// variable, so a typo never silently turns telemetry off.
type settings struct {
	disabled        bool
	serviceName     string
	resourceAttrs   map[string]string
	tracesExporter  string // "otlp" or "none"
	metricsOTLP     bool
	traces, metrics endpoint
	sampler         string
	samplerArg      float64
	propagators     []string
	captureContent  bool
	// ints holds the integer variables that were set, by name; they are
	// applied as options, so that Config.LookupEnv is the one source.
	ints map[string]int64
}

// endpoint is one signal's OTLP destination.
type endpoint struct {
	url      *url.URL // nil: none configured
	protocol string
}

type envReader struct {
	lookup func(string) (string, bool)
}

func (r envReader) get(name string) string {
	v, _ := r.lookup(name)
	return strings.TrimSpace(v)
}

func (r envReader) boolean(name string) (bool, error) {
	switch v := strings.ToLower(r.get(name)); v {
	case "":
		return false, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
}

// parseSettings reads and validates every variable this package or the
// SDK under it uses.
func parseSettings(lookup func(string) (string, bool), defaultName string) (settings, error) {
	r := envReader{lookup}
	var s settings
	var err error
	if s.disabled, err = r.boolean("OTEL_SDK_DISABLED"); err != nil {
		return s, err
	}
	if s.captureContent, err = r.boolean("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"); err != nil {
		return s, err
	}
	if s.resourceAttrs, err = parseResourceAttrs(r.get("OTEL_RESOURCE_ATTRIBUTES")); err != nil {
		return s, err
	}
	s.serviceName = r.get("OTEL_SERVICE_NAME")
	if s.serviceName == "" {
		s.serviceName = s.resourceAttrs["service.name"]
	}
	if s.serviceName == "" {
		s.serviceName = defaultName
	}
	// Integers the SDK would read itself: checked here so that a bad one
	// fails start-up instead of being dropped with a log line.
	s.ints = map[string]int64{}
	for _, name := range []string{
		"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
		"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
	} {
		if v := r.get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return s, fmt.Errorf("%s=%q: want a non-negative integer (milliseconds or a count)", name, v)
			}
			s.ints[name] = n
		}
	}
	if s.traces, err = parseEndpoint(r, "TRACES", "/v1/traces"); err != nil {
		return s, err
	}
	if s.metrics, err = parseEndpoint(r, "METRICS", "/v1/metrics"); err != nil {
		return s, err
	}
	switch v := strings.ToLower(r.get("OTEL_TRACES_EXPORTER")); v {
	case "":
		// The specification's default is otlp to localhost; ours is to
		// export only where an endpoint was named, so that an unconfigured
		// binary costs nothing and sends nothing.
		s.tracesExporter = "none"
		if s.traces.url != nil {
			s.tracesExporter = "otlp"
		}
	case "otlp", "none":
		s.tracesExporter = v
		if v == "otlp" && s.traces.url == nil {
			return s, fmt.Errorf("OTEL_TRACES_EXPORTER=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
		}
	default:
		return s, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp or none", v)
	}
	// Prometheus (/metrics) is always served; otlp adds a push exporter.
	s.metricsOTLP = s.metrics.url != nil
	for _, e := range strings.Split(strings.ToLower(r.get("OTEL_METRICS_EXPORTER")), ",") {
		switch e = strings.TrimSpace(e); e {
		case "":
		case "none", "prometheus":
			s.metricsOTLP = false
		case "otlp":
			if s.metrics.url == nil {
				return s, fmt.Errorf("OTEL_METRICS_EXPORTER=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
			}
			s.metricsOTLP = true
		default:
			return s, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: want otlp, prometheus or none", e)
		}
	}
	if s.sampler, s.samplerArg, err = parseSampler(r); err != nil {
		return s, err
	}
	s.propagators = []string{"tracecontext", "baggage"}
	if v := r.get("OTEL_PROPAGATORS"); v != "" {
		s.propagators = nil
		for _, p := range strings.Split(v, ",") {
			switch p = strings.TrimSpace(strings.ToLower(p)); p {
			case "tracecontext", "baggage":
				s.propagators = append(s.propagators, p)
			case "none":
			default:
				return s, fmt.Errorf("OTEL_PROPAGATORS: %q is not supported (tracecontext, baggage or none)", p)
			}
		}
	}
	return s, nil
}

// parseEndpoint reads OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT, else the
// generic OTEL_EXPORTER_OTLP_ENDPOINT (to which, over HTTP, the signal's
// path is appended, as the specification says), and the protocol.
func parseEndpoint(r envReader, signal, path string) (endpoint, error) {
	var e endpoint
	protoVar := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	e.protocol = r.get(protoVar)
	if e.protocol == "" {
		protoVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		e.protocol = r.get(protoVar)
	}
	switch e.protocol {
	case "":
		e.protocol = ProtocolHTTPProtobuf // the specification's default
	case ProtocolGRPC, ProtocolHTTPProtobuf:
	default:
		return e, fmt.Errorf("%s=%q: want grpc or http/protobuf", protoVar, e.protocol)
	}
	name := "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"
	raw := r.get(name)
	generic := raw == ""
	if generic {
		name = "OTEL_EXPORTER_OTLP_ENDPOINT"
		raw = r.get(name)
	}
	if raw == "" {
		return e, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return e, fmt.Errorf("%s=%q: want an http:// or https:// URL with a host", name, raw)
	}
	if generic && e.protocol == ProtocolHTTPProtobuf {
		u.Path = strings.TrimSuffix(u.Path, "/") + path
	}
	e.url = u
	return e, nil
}

func parseSampler(r envReader) (string, float64, error) {
	name := strings.ToLower(r.get("OTEL_TRACES_SAMPLER"))
	if name == "" {
		name = "parentbased_always_on"
	}
	arg := 1.0
	switch name {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if v := r.get("OTEL_TRACES_SAMPLER_ARG"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return "", 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a number from 0 to 1", v)
			}
			arg = f
		}
	default:
		return "", 0, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
	}
	return name, arg, nil
}

// parseResourceAttrs reads "k=v,k2=v2" with percent-encoded values.
func parseResourceAttrs(v string) (map[string]string, error) {
	out := map[string]string{}
	if v == "" {
		return out, nil
	}
	for _, kv := range strings.Split(v, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", kv)
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: value of %q: %v", k, err)
		}
		out[k] = dec
	}
	return out, nil
}
