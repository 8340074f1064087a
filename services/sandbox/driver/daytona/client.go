package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The vault names of the driver's credentials.
const (
	KeyName = "DAYTONA_API_KEY"
	URLName = "DAYTONA_API_URL"
)

// domain is the sandbox service's ErrorInfo domain.
const domain grpcerr.Domain = "sandbox.fabro.dev"

// Credentials resolves names from the vault; *vaultclient.Client is one.
type Credentials interface {
	Resolve(ctx context.Context, names []string) (values map[string]string, missing []string, err error)
}

// apiError is a failed Daytona call: its HTTP status and Daytona's error
// body (ApiErrorResponseDto: statusCode, code, message, ...). It carries the
// gRPC status the service returns for it, and wraps the driver error that
// says what it means.
type apiError struct {
	op      string // "create sandbox", "exec", ...
	status  int
	code    string // Daytona's error code, such as SANDBOX_NOT_FOUND
	message string
	kind    error // driver.ErrGone, ErrNotFound, ...; nil for none
	// retryAfter is Daytona's Retry-After on a 429 or 5xx, 0 when none.
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("daytona %s: HTTP %d", e.op, e.status)
	if e.code != "" {
		msg += " " + e.code
	}
	if e.message != "" {
		msg += ": " + e.message
	}
	return msg
}

func (e *apiError) Unwrap() error { return e.kind }

// GRPCStatus maps Daytona's status codes: 401 and 403 to PERMISSION_DENIED
// naming the credential (never its value), 404 to NOT_FOUND, 429 (after
// the retries) to RESOURCE_EXHAUSTED, 5xx (after the retries) to
// UNAVAILABLE, both with RetryInfo (Daytona's Retry-After, or 1s), and a
// bad request to INVALID_ARGUMENT.
func (e *apiError) GRPCStatus() *status.Status {
	code, reason := codes.Unknown, "DAYTONA_ERROR"
	msg := e.Error()
	md := map[string]string{"http_status": strconv.Itoa(e.status)}
	if e.code != "" {
		md["daytona_code"] = e.code
	}
	switch {
	case e.status == http.StatusUnauthorized || e.status == http.StatusForbidden:
		code, reason = codes.PermissionDenied, "DAYTONA_CREDENTIAL_REJECTED"
		md["credential"] = KeyName
		msg = fmt.Sprintf("daytona %s: Daytona refused the credential %s (HTTP %d); check the %s the vault holds", e.op, KeyName, e.status, KeyName)
	case e.status == http.StatusNotFound:
		code, reason = codes.NotFound, "DAYTONA_NOT_FOUND"
	case e.status == http.StatusTooManyRequests:
		code, reason = codes.ResourceExhausted, "DAYTONA_RATE_LIMITED"
	case e.status >= 500:
		code, reason = codes.Unavailable, "DAYTONA_UNAVAILABLE"
	case e.status == http.StatusBadRequest || e.status == http.StatusUnprocessableEntity:
		code, reason = codes.InvalidArgument, "DAYTONA_BAD_REQUEST"
	case e.status == http.StatusRequestTimeout:
		code, reason = codes.DeadlineExceeded, "DAYTONA_TIMEOUT"
	case e.status == http.StatusConflict:
		code, reason = codes.FailedPrecondition, "DAYTONA_CONFLICT"
	}
	opts := []grpcerr.Option{grpcerr.Metadata(md)}
	if transient(e.status) {
		opts = append(opts, grpcerr.RetryAfter(max(e.retryAfter, time.Second)))
	}
	return domain.Status(code, reason, msg, opts...)
}

// goneError is a sandbox that Daytona reports failed, destroyed or missing.
type goneError struct {
	id, state, reason string
}

func (e *goneError) Error() string {
	msg := fmt.Sprintf("the Daytona sandbox %s is %s", e.id, e.state)
	if e.reason != "" {
		msg += ": " + e.reason
	}
	return msg
}

func (e *goneError) Unwrap() error { return driver.ErrGone }

func (e *goneError) GRPCStatus() *status.Status {
	return domain.Status(codes.FailedPrecondition, "SANDBOX_GONE", e.Error()+"; create a new sandbox",
		grpcerr.Meta("daytona_sandbox_id", e.id, "daytona_state", e.state))
}

// Retry bounds transient failures (429, 5xx, connection errors).
type Retry struct {
	Attempts int           // in all, the first included; default 4
	Base     time.Duration // first wait, doubled each time; default 200ms
	Max      time.Duration // longest wait, Retry-After included; default 5s
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 4
	}
	if r.Base <= 0 {
		r.Base = 200 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 5 * time.Second
	}
	return r
}

// client calls Daytona's REST API, resolving its URL and key from the vault
// on every call, so a rotated key is used at once and none is kept here.
type client struct {
	creds Credentials
	http  *http.Client
	retry Retry
}

type endpoint struct{ base, key string }

func (c *client) endpoint(ctx context.Context) (endpoint, error) {
	vals, missing, err := c.creds.Resolve(ctx, []string{URLName, KeyName})
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: daytona: the vault did not resolve %s and %s: %v", driver.ErrUnavailable, URLName, KeyName, err)
	}
	if len(missing) > 0 {
		return endpoint{}, fmt.Errorf("%w: daytona: the vault holds no %s", driver.ErrUnavailable, strings.Join(missing, " nor "))
	}
	base, key := strings.TrimRight(vals[URLName], "/"), vals[KeyName]
	if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return endpoint{}, fmt.Errorf("%w: daytona: %s in the vault is not an http(s) URL", driver.ErrUnavailable, URLName)
	}
	if key == "" {
		return endpoint{}, fmt.Errorf("%w: daytona: %s in the vault is empty", driver.ErrUnavailable, KeyName)
	}
	return endpoint{base: base, key: key}, nil
}

// request is one call; body is JSON unless it is a *multipartBody.
type request struct {
	op, method, path string
	query            url.Values
	body             any
	out              any            // decoded from a JSON answer when not nil
	raw              *io.ReadCloser // the answer's body, for downloads
	notFound         error          // what a 404 means here
	// once: the call is not safe to repeat (it runs a command, moves or
	// creates something), so a 5xx or a lost connection is not retried.
	once bool
}

type multipartBody struct {
	field, name string
	data        []byte
}

// do sends r, retrying transient failures within c.retry.
func (c *client) do(ctx context.Context, r request) error {
	ep, err := c.endpoint(ctx)
	if err != nil {
		return err
	}
	var payload []byte
	ctype := ""
	switch b := r.body.(type) {
	case nil:
	case *multipartBody:
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		w, err := mw.CreateFormFile(b.field, b.name)
		if err != nil {
			return err
		}
		w.Write(b.data)
		mw.Close()
		payload, ctype = buf.Bytes(), mw.FormDataContentType()
	default:
		if payload, err = json.Marshal(b); err != nil {
			return err
		}
		ctype = "application/json"
	}
	u := ep.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	rt := c.retry.withDefaults()
	wait := rt.Base
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, r.method, u, bytes.NewReader(payload))
		if err != nil {
			return fmt.Errorf("%w: daytona: %s: %v", driver.ErrUnavailable, URLName, err)
		}
		req.Header.Set("Authorization", "Bearer "+ep.key)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := c.http.Do(req)
		var retryAfter time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			// Never the URL's query or the key: the error names the call.
			err = fmt.Errorf("%w: daytona %s: %v", driver.ErrUnavailable, r.op, errors.Unwrap(err))
			if r.once {
				return err // it may have been done: only the caller knows whether to try again
			}
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return c.answer(resp, r)
		default:
			err = c.failure(resp, r)
			retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
			if ae, ok := err.(*apiError); ok {
				ae.retryAfter = retryAfter
			}
			// A 429 was refused before anything was done; a 5xx of a
			// call that is not safe to repeat may have done it.
			if !transient(resp.StatusCode) || (r.once && resp.StatusCode != http.StatusTooManyRequests) {
				return err
			}
		}
		if attempt >= rt.Attempts {
			return err
		}
		d := max(wait, retryAfter)
		d = min(d, rt.Max)
		wait *= 2
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func transient(code int) bool { return code == http.StatusTooManyRequests || code >= 500 }

func parseRetryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

func (c *client) answer(resp *http.Response, r request) error {
	if r.raw != nil {
		*r.raw = resp.Body
		return nil
	}
	defer resp.Body.Close()
	if r.out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(r.out); err != nil {
		return fmt.Errorf("daytona %s: an answer that is not the documented JSON: %w", r.op, err)
	}
	return nil
}

// errorBody is Daytona's error answer (ApiErrorResponseDto); older servers
// send NestJS's {statusCode, message, error}, message a string or a list.
type errorBody struct {
	StatusCode int             `json:"statusCode"`
	Code       string          `json:"code"`
	Message    json.RawMessage `json:"message"`
	Error      string          `json:"error"`
}

func (c *client) failure(resp *http.Response, r request) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{op: r.op, status: resp.StatusCode}
	var eb errorBody
	if json.Unmarshal(b, &eb) == nil {
		e.code = eb.Code
		var s string
		var list []string
		switch {
		case json.Unmarshal(eb.Message, &s) == nil:
			e.message = s
		case json.Unmarshal(eb.Message, &list) == nil:
			e.message = strings.Join(list, "; ")
		default:
			e.message = eb.Error
		}
	}
	if len(e.message) > 500 {
		e.message = e.message[:500]
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		e.kind = r.notFound
	case http.StatusBadRequest:
		e.kind = driver.ErrInvalid
	case http.StatusTooManyRequests:
	default:
		if resp.StatusCode >= 500 {
			e.kind = driver.ErrUnavailable
		}
	}
	return e
}
