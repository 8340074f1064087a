package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStringMatchesEncodingJSON(t *testing.T) {
	for _, lit := range []string{`""`, `"plain"`, `"C:\\path \"q\" \/ \b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`, `"lone \ud83d here"`, `"\u0000"`, `"ü😀 raw"`} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatal(err)
		}
		var scratch []byte
		got, err := String(&scratch, []byte(lit))
		if err != nil || got != want {
			t.Errorf("String(%s) = %q, %v; want %q", lit, got, err, want)
		}
	}
}

func TestValid(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`: true,
		` [ ] `:                true,
		`{"this is not": json`: false,
		`{"a":1,}`:             false,
		`{"a" 1}`:              false,
		`"unterminated`:        false,
		`"bad \x escape"`:      false,
		"\"ctl \x01\"":         false,
		`{"a":1} trailing`:     false,
		`[1 2]`:                false,
		`tru`:                  false,
	} {
		if got := Valid([]byte(in)); got != want {
			t.Errorf("Valid(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestObjectAndInt(t *testing.T) {
	var keys []string
	var n int64
	err := Object([]byte(`{"x":{"y":[1,2]},"n":42,"s":"v"}`), func(k, v []byte) error {
		keys = append(keys, string(k))
		if string(k) == "n" {
			var err error
			n, err = Int(v)
			return err
		}
		return nil
	})
	if err != nil || len(keys) != 3 || n != 42 {
		t.Fatalf("keys %v n %d err %v", keys, n, err)
	}
	if err := Object([]byte(`{"a":1`), func(k, v []byte) error { return nil }); err == nil {
		t.Error("truncated object accepted")
	}
}

func TestZeroAllocScan(t *testing.T) {
	data := []byte(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hello"}}`)
	allocs := testing.AllocsPerRun(100, func() {
		_ = Object(data, func(k, v []byte) error { return nil })
	})
	if allocs != 0 {
		t.Errorf("Object allocates %v times, want 0", allocs)
	}
}

// FuzzScanner checks the scanner against encoding/json: the same documents
// are valid, and strings unescape to the same text.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{"a":"b\u00e9\ud83d\ude00\n","c":[1,-2.5e+3,true,false,null,{}]}`, `{"a" "b"}`, `[1,]`, `"\ud800"`, `{"a":01}`, `"\x01"`, `[]`, `{"k":"v"}  `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var s Scanner
		s.Reset([]byte(doc))
		s.Skip()
		ok := s.End() == nil
		if ok != json.Valid([]byte(doc)) {
			t.Fatalf("scanner valid=%v, encoding/json valid=%v for %q", ok, !ok, doc)
		}
		if Valid([]byte(doc)) != ok {
			t.Fatalf("Valid disagrees with Skip for %q", doc)
		}
		if ok && strings.HasPrefix(strings.TrimSpace(doc), `"`) {
			var want string
			if err := json.Unmarshal([]byte(doc), &want); err != nil {
				t.Fatal(err)
			}
			s.Reset([]byte(doc))
			if got := string(s.String()); got != want {
				t.Fatalf("String() = %q, encoding/json %q", got, want)
			}
			var scratch []byte
			if got, err := String(&scratch, []byte(strings.TrimSpace(doc))); err != nil || got != want {
				t.Fatalf("String(%q) = %q, %v; encoding/json %q", doc, got, err, want)
			}
		}
	})
}
