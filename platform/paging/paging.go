// Package paging implements the List calls' page_size and page_token: keyset
// pages whose opaque token holds the sort key of the last item returned, so
// that items inserted or removed between two pages never make the next page
// skip or repeat one that was there throughout.
//
// A token also holds a digest of the request's other fields (the filter): a
// token is refused with a request it was not issued for. It is not signed:
// a hand-made cursor only starts the listing elsewhere, which grants
// nothing, since every item still passes the handler's own filter.
package paging

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

const (
	// DefaultSize is the page size when a request gives none.
	DefaultSize = 100
	// MaxSize caps any page size a request asks for.
	MaxSize = 1000
	version = 1
)

// ErrInvalidToken is wrapped by every error about a page token: handlers
// answer it with INVALID_ARGUMENT on field page_token.
var ErrInvalidToken = errors.New("invalid page_token")

// ErrInvalidSize is wrapped by the error for a negative page_size.
var ErrInvalidSize = errors.New("invalid page_size")

type token struct {
	V int      `json:"v"`
	F string   `json:"f"`
	K []string `json:"k"`
}

// Size returns the page size to use for a requested one: DefaultSize for 0,
// MaxSize at most, an error wrapping ErrInvalidSize for a negative one.
func Size(requested int32) (int, error) {
	switch {
	case requested < 0:
		return 0, fmt.Errorf("%w: %d is negative", ErrInvalidSize, requested)
	case requested == 0:
		return DefaultSize, nil
	case requested > MaxSize:
		return MaxSize, nil
	}
	return int(requested), nil
}

// Filter digests the request fields, other than the page fields, that pick
// which items are listed; pass the same values when issuing and accepting.
func Filter(fields ...string) string {
	h := sha256.New()
	for _, f := range fields {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Encode makes the token that continues a listing after the item whose sort
// key is key.
func Encode(filter string, key ...string) string {
	b, _ := json.Marshal(token{V: version, F: filter, K: key})
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode returns the sort key a token continues after; nil for "" (the first
// page). The error wraps ErrInvalidToken when the token is not one of ours or
// was issued for another filter.
func Decode(tok, filter string) ([]string, error) {
	if tok == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, fmt.Errorf("%w: not a token this service issued", ErrInvalidToken)
	}
	var t token
	if err := json.Unmarshal(raw, &t); err != nil || t.V != version || len(t.K) == 0 {
		return nil, fmt.Errorf("%w: not a token this service issued", ErrInvalidToken)
	}
	if t.F != filter {
		return nil, fmt.Errorf("%w: the token was issued for a request with other filters", ErrInvalidToken)
	}
	return t.K, nil
}

// Request is what every List request has.
type Request interface {
	GetPageSize() int32
	GetPageToken() string
}

// Page returns one page of items, which must be sorted in listing order, and
// the token of the next page ("" after the last). after reports whether an
// item comes after the cursor in listing order; key gives an item's sort
// key, unique across items (end it with the item's id).
func Page[T any](items []T, req Request, filter string, key func(T) []string, after func(item T, cursor []string) bool) ([]T, string, error) {
	size, err := Size(req.GetPageSize())
	if err != nil {
		return nil, "", err
	}
	cursor, err := Decode(req.GetPageToken(), filter)
	if err != nil {
		return nil, "", err
	}
	start := 0
	if cursor != nil {
		start = sort.Search(len(items), func(i int) bool { return after(items[i], cursor) })
	}
	end := min(start+size, len(items))
	page := items[start:end]
	next := ""
	if end < len(items) && len(page) > 0 {
		next = Encode(filter, key(page[len(page)-1])...)
	}
	return page, next, nil
}

// Ascending is an after for items sorted by key ascending, comparing the
// key's parts in order as strings.
func Ascending[T any](key func(T) []string) func(T, []string) bool {
	return func(item T, cursor []string) bool { return compare(key(item), cursor) > 0 }
}

// Descending is an after for items sorted by key descending.
func Descending[T any](key func(T) []string) func(T, []string) bool {
	return func(item T, cursor []string) bool { return compare(key(item), cursor) < 0 }
}

func compare(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		switch {
		case a[i] < b[i]:
			return -1
		case a[i] > b[i]:
			return 1
		}
	}
	return len(a) - len(b)
}

// Field names the request field a paging error is about: page_size or
// page_token.
func Field(err error) string {
	if errors.Is(err, ErrInvalidSize) {
		return "page_size"
	}
	return "page_token"
}
