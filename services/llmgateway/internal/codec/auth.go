package codec

import (
	"net/http"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// AuthDefaults are what a codec assumes where the catalog's Auth is silent:
// the credential names to try, the scheme, and the header of the HEADER
// scheme (Anthropic's x-api-key, Gemini's x-goog-api-key).
type AuthDefaults struct {
	Names  []string
	Scheme llmv1.AuthScheme
	Header string
}

// Credential is the header that carries a provider credential, and its
// value; the zero Credential sends none.
type Credential struct {
	Header, Value string
}

// ResolveCredential reads call's credential as the catalog's Auth (or d,
// where it is silent) says to present it: the first name with a value, as
// "Authorization: Bearer <value>" or as the value of the scheme's header.
// NONE, AWS_SIGV4 (signed by its codec) and an absent value give none.
func ResolveCredential(call *Call, d AuthDefaults) Credential {
	auth := call.Provider.GetAuth()
	names := auth.GetCredentialNames()
	if len(names) == 0 {
		names = d.Names
	}
	var value string
	for _, n := range names {
		if v := call.Credentials[n]; v != "" {
			value = v
			break
		}
	}
	scheme := auth.GetScheme()
	if scheme == llmv1.AuthScheme_AUTH_SCHEME_UNSPECIFIED {
		scheme = d.Scheme
	}
	header := auth.GetHeaderName()
	if header == "" {
		header = d.Header
	}
	switch {
	case value == "":
		return Credential{}
	case scheme == llmv1.AuthScheme_AUTH_SCHEME_BEARER:
		return Credential{Header: "Authorization", Value: "Bearer " + value}
	case scheme == llmv1.AuthScheme_AUTH_SCHEME_HEADER && header != "":
		return Credential{Header: header, Value: value}
	}
	return Credential{}
}

// ApplyAuth sets a provider request's catalog headers and credential, in
// that order, for every codec: the catalog's extra headers first, so an
// overlay can add headers (or override a codec default such as
// anthropic-version) but never replace the credential the vault resolved.
// A codec sets its own fixed headers before, and signs (SigV4) after.
func ApplyAuth(h http.Header, p *llmv1.Provider, cred Credential) {
	for k, v := range p.GetExtraHeaders() {
		h.Set(k, v)
	}
	if cred.Header != "" && cred.Value != "" {
		h.Set(cred.Header, cred.Value)
	}
}
