package llmgateway

import (
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/codec"
	"github.com/fabro-sh/fabro-go/services/llmgateway/internal/redact"
)

// maxMessage bounds an upstream message a caller sees.
const maxMessage = 512

// identifierRE is what an upstream error code or request id must be to
// pass on: an identifier (invalid_api_key, ThrottlingException,
// req_011CX..., a UUID), never free text that could quote a request.
var identifierRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// checkedError makes an upstream error fit for callers, logs, spans and
// events before it becomes any of them. A codec error keeps its kind,
// status and retry hint; its code and request id pass only if each, with
// creds masked, is still a plain identifier; its message is masked, on one
// line, at most maxMessage bytes, and was read from a known field of the
// provider's error (a body in no known shape is never a message: see
// codec.UnreadableBody). Any other error is replaced by classify with a
// fixed message, so none of its text travels on.
func checkedError(err error, redactor func() *redact.Redactor) error {
	var ce *codec.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	r := redactor()
	out := *ce
	out.Message = oneLine(r.String(ce.Message), maxMessage)
	out.Code = identifier(r.String(ce.Code), 64)
	out.RequestID = identifier(r.String(ce.RequestID), 128)
	return &out
}

// identifier is s if it is a plain identifier of at most n bytes, else "".
func identifier(s string, n int) string {
	if len(s) > n || !identifierRE.MatchString(s) {
		return ""
	}
	return s
}

// oneLine is s as valid UTF-8 on one line (control characters as spaces,
// so an upstream cannot forge log lines or SSE frames), cut at n bytes.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// notSecret names the credentials resolved beside the secrets that are
// settings, not secrets: masking a region would only mangle messages.
var notSecret = map[string]bool{"AWS_REGION": true, "AWS_DEFAULT_REGION": true}

// lazyRedactor returns redactorOf(creds), built on first use only: on the
// error path, not on every call.
func lazyRedactor(creds map[string]string) func() *redact.Redactor {
	var r *redact.Redactor
	return func() *redact.Redactor {
		if r == nil {
			r = redactorOf(creds)
		}
		return r
	}
}

// redactorOf masks the secret values among creds.
func redactorOf(creds map[string]string) *redact.Redactor {
	var secrets []string
	for _, name := range slices.Sorted(maps.Keys(creds)) {
		if !notSecret[name] {
			secrets = append(secrets, creds[name])
		}
	}
	return redact.New(secrets...)
}

// redactPlainError masks the secret values of creds in any error's text
// (model discovery's, which are logged and shown as warnings).
func redactPlainError(err error, creds map[string]string) error {
	if err == nil || len(creds) == 0 {
		return err
	}
	r := redactorOf(creds)
	if msg := r.String(err.Error()); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}
