// Package bedrock is the bedrock-converse codec: AWS Bedrock Converse
// (POST /model/{modelId}/converse, JSON) and ConverseStream
// (POST /model/{modelId}/converse-stream, application/vnd.amazon.eventstream
// binary frames), with SigV4 or Bedrock API key (bearer) authentication.
//
// Requests are built and responses decoded by hand; aws-sdk-go-v2 provides
// only the SigV4 signer. The stream decoder parses and CRC-checks frames
// itself, so it allocates nothing per frame beyond the strings it hands out.
package bedrock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
)

// Credential names the codec reads from Call.Credentials.
const (
	CredBearerToken  = "AWS_BEARER_TOKEN_BEDROCK"
	CredAccessKeyID  = "AWS_ACCESS_KEY_ID"
	CredSecretKey    = "AWS_SECRET_ACCESS_KEY"
	CredSessionToken = "AWS_SESSION_TOKEN"
	CredRegion       = "AWS_REGION"
	// CredDefaultRegion is the older name some environments still set.
	CredDefaultRegion = "AWS_DEFAULT_REGION"
)

// DefaultRegion is used when neither a credential nor the base URL names one.
const DefaultRegion = "us-east-1"

// signingService is the SigV4 service name of bedrock-runtime.
const signingService = "bedrock"

// Codec is the bedrock-converse codec.
type Codec struct {
	now    func() time.Time
	signer *v4.Signer
}

var _ codec.Codec = (*Codec)(nil)

// Option configures a Codec.
type Option func(*Codec)

// WithClock sets the signing clock (tests pin it to check signatures).
func WithClock(now func() time.Time) Option { return func(c *Codec) { c.now = now } }

// New returns the bedrock-converse codec.
func New(opts ...Option) codec.Codec {
	c := &Codec{now: time.Now, signer: v4.NewSigner()}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Name implements codec.Codec.
func (c *Codec) Name() string { return "bedrock-converse" }

// NewDecoder implements codec.Codec.
func (c *Codec) NewDecoder(body io.Reader) codec.Decoder { return newDecoder(body) }

// NewRequest implements codec.Codec.
func (c *Codec) NewRequest(ctx context.Context, call *codec.Call) (*http.Request, error) {
	body, err := buildBody(call)
	if err != nil {
		return nil, err
	}
	region := regionFor(call)
	u, err := endpoint(call.Provider.GetBaseUrl(), region, call.Model, call.Stream)
	if err != nil {
		return nil, &codec.Error{Kind: llmv1.ErrorKind_ERROR_KIND_INVALID_REQUEST, Message: "bedrock: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("bedrock: new request: %w", err)
	}
	// NewRequest re-parses the string; keep our escaping of the model id.
	req.URL = u
	req.Header.Set("Content-Type", "application/json")
	if call.Stream {
		req.Header.Set("Accept", "application/vnd.amazon.eventstream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if err := c.authorize(ctx, req, body, call, region); err != nil {
		return nil, err
	}
	return req, nil
}

// authorize applies the catalog's extra headers, then a Bedrock API key as
// a bearer token when one is present, or else signs the request with SigV4
// (last: the signature covers the extra headers, and replaces any
// Authorization among them).
func (c *Codec) authorize(ctx context.Context, req *http.Request, body []byte, call *codec.Call, region string) error {
	creds := call.Credentials
	if tok := creds[CredBearerToken]; tok != "" {
		codec.ApplyAuth(req.Header, call.Provider, codec.Credential{Header: "Authorization", Value: "Bearer " + tok})
		return nil
	}
	codec.ApplyAuth(req.Header, call.Provider, codec.Credential{})
	id, secret := creds[CredAccessKeyID], creds[CredSecretKey]
	if id == "" || secret == "" {
		return &codec.Error{
			Kind:    llmv1.ErrorKind_ERROR_KIND_AUTHENTICATION,
			Message: "bedrock: no credentials: set " + CredBearerToken + ", or " + CredAccessKeyID + " and " + CredSecretKey,
		}
	}
	sum := sha256.Sum256(body)
	cred := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: creds[CredSessionToken]}
	if err := c.signer.SignHTTP(ctx, cred, req, hex.EncodeToString(sum[:]), signingService, region, c.now().UTC()); err != nil {
		return fmt.Errorf("bedrock: sign request: %w", err)
	}
	return nil
}

// regionFor picks the region: the AWS_REGION credential, else the region
// named by the base URL's host, else us-east-1.
func regionFor(call *codec.Call) string {
	for _, k := range []string{CredRegion, CredDefaultRegion} {
		if r := call.Credentials[k]; r != "" {
			return r
		}
	}
	if u, err := url.Parse(call.Provider.GetBaseUrl()); err == nil {
		// bedrock-runtime.{region}.amazonaws.com, and the FIPS variant.
		parts := strings.Split(u.Hostname(), ".")
		if len(parts) >= 4 && strings.HasPrefix(parts[0], "bedrock-runtime") && parts[1] != "{region}" {
			return parts[1]
		}
	}
	return DefaultRegion
}

// endpoint builds the Converse URL. The model id is one path segment with
// everything but unreserved characters escaped: inference-profile ids carry
// ':' and ARNs carry ':' and '/'.
func endpoint(base, region, model string, stream bool) (*url.URL, error) {
	if model == "" {
		return nil, fmt.Errorf("empty model id")
	}
	if base == "" {
		base = "https://bedrock-runtime.{region}.amazonaws.com"
	}
	base = strings.ReplaceAll(base, "{region}", region)
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("base URL: %w", err)
	}
	op := "/converse"
	if stream {
		op = "/converse-stream"
	}
	basePath, baseRaw := u.Path, u.EscapedPath()
	u.Path = basePath + "/model/" + model + op
	u.RawPath = baseRaw + "/model/" + escapeSegment(model) + op
	return u, nil
}

// escapeSegment percent-encodes every byte outside RFC 3986's unreserved set.
func escapeSegment(s string) string {
	const hexdig = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&15])
	}
	return b.String()
}
