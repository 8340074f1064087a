package llmgateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/catalog"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/envelope"
)

// Opaque provider items (an OpenAI reasoning item, an Anthropic
// server_tool_use block, ...) become provider input as they are, so the
// gateway never trusts one a caller made up: every OpaquePart it hands out
// carries, as its data, an envelope (package envelope) of its kind and
// provider JSON, bound to the route that produced it and to the caller's
// principal. A request's opaque parts must be such envelopes, for a route
// the request may take and for the same caller; each is opened back into
// the provider's item before any route sees the request. Anything else is
// INVALID_ARGUMENT naming the part's data field, and nothing goes
// upstream. The agent carries the parts back as it received them.

// opaquePlain is what an opaque part's envelope seals: its kind and data,
// so that neither can be changed without the envelope failing to open.
func opaquePlain(kind, data string) []byte {
	b := make([]byte, 0, len(kind)+1+len(data))
	return append(append(append(b, kind...), 0), data...)
}

// sealOpaque returns the envelope an OpaquePart of route carries out.
func (s *Service) sealOpaque(route, principal, kind, data string) string {
	return s.sealer.Seal(route, principal, opaquePlain(kind, data))
}

// errOpaqueKind: the envelope opened, but for a part of another kind.
var errOpaqueKind = errors.New("was issued for an opaque part of another kind")

// openOpaque returns req with its opaque parts opened, req itself when it
// has none. routes are the canonical routes the request may take; an
// envelope made by another is refused before it is opened.
func (s *Service) openOpaque(ctx context.Context, req *llmv1.Request, routes func() map[string]bool) (*llmv1.Request, error) {
	if !hasOpaque(req) {
		return req, nil
	}
	allowed := routes()
	principal := auth.Owner(ctx)
	r := cloneRequest(req)
	open := func(field string, o *llmv1.OpaquePart) error {
		if claimed, err := envelope.Route(o.GetData()); err == nil && !allowed[claimed] {
			return invalid(field, "%s: the opaque part was made by %s, and this request cannot go there", field, claimed)
		}
		_, plain, err := s.sealer.Open(o.GetData(), principal)
		var kind, data string
		if err == nil {
			k, d, ok := strings.Cut(string(plain), "\x00")
			if !ok || k != o.GetKind() {
				err = errOpaqueKind
			}
			kind, data = k, d
		}
		if err != nil {
			return invalid(field, "%s: the opaque part %v (send back opaque parts exactly as the gateway returned them, to the same caller)", field, err)
		}
		o.Kind, o.Data = kind, data
		return nil
	}
	for i, m := range r.GetMessages() {
		for j, p := range m.GetParts() {
			if o := p.GetOpaque(); o != nil {
				if err := open(fmt.Sprintf("request.messages[%d].parts[%d].opaque.data", i, j), o); err != nil {
					return nil, err
				}
			}
			for k, c := range p.GetToolResult().GetContent() {
				if o := c.GetOpaque(); o != nil {
					if err := open(fmt.Sprintf("request.messages[%d].parts[%d].tool_result.content[%d].opaque.data", i, j, k), o); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return r, nil
}

func hasOpaque(req *llmv1.Request) bool {
	for _, m := range req.GetMessages() {
		for _, p := range m.GetParts() {
			if p.GetOpaque() != nil {
				return true
			}
			for _, c := range p.GetToolResult().GetContent() {
				if c.GetOpaque() != nil {
					return true
				}
			}
		}
	}
	return false
}

// planRoutes is the set of canonical routes a request resolved to primary
// may take: primary and every fallback that resolves.
func (s *Service) planRoutes(primary catalog.Route, selectors []string) map[string]bool {
	routes := map[string]bool{primary.Canonical(): true}
	for _, sel := range selectors {
		if r, err := s.resolve(sel); err == nil {
			routes[r.Canonical()] = true
		}
	}
	return routes
}

// checkS3Images refuses s3:// image sources, which Bedrock would fetch
// with the gateway's own AWS role (any object that role can read), unless
// the operator allowed the bucket (-llm-bedrock-s3-buckets).
func (s *Service) checkS3Images(req *llmv1.Request) error {
	var check func(field string, parts []*llmv1.ContentPart) error
	check = func(field string, parts []*llmv1.ContentPart) error {
		for j, p := range parts {
			if u := p.GetImage().GetUrl(); len(u) >= 5 && strings.EqualFold(u[:5], "s3://") {
				f := fmt.Sprintf("%s[%d].image.url", field, j)
				pu, err := url.Parse(u)
				if err != nil || pu.Host == "" {
					return invalid(f, "%s: malformed s3:// URL", f)
				}
				if !slices.Contains(s.s3Buckets, pu.Host) {
					return invalid(f, "%s: s3:// image sources are read with the gateway's own credentials, and bucket %q is not one the operator allowed (-llm-bedrock-s3-buckets); send the image bytes instead", f, pu.Host)
				}
			}
			if err := check(fmt.Sprintf("%s[%d].tool_result.content", field, j), p.GetToolResult().GetContent()); err != nil {
				return err
			}
		}
		return nil
	}
	for i, m := range req.GetMessages() {
		if err := check(fmt.Sprintf("request.messages[%d].parts", i), m.GetParts()); err != nil {
			return err
		}
	}
	return nil
}
